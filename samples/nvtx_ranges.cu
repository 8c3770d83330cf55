// NVTX ranges around CUDA work, as a program instrumented for Nsight Systems has them:
// nested pushes, a domain's range, a start/end range, steps, and a CUDA graph captured
// under a range and replayed under another. NVTX 3 is header only: the ranges reach a
// tool when NVTX_INJECTION64_PATH names one (cudump sets it under --trace and --layers).
// Each launch prints the scopes cudump should give it, outermost first ("expect K a/b").
#include <cstdio>

#include <nvtx3/nvToolsExt.h>

#include "check.h"

constexpr int N = 1 << 12;

__global__ void scale(float *x, float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= a;
}

static int launched;

static void launch(float *x, cudaStream_t stream, const char *expect)
{
    scale<<<N / 256, 256, 0, stream>>>(x, 1.0f, N);
    CHECK_LAUNCH();
    printf("expect %d %s\n", ++launched, expect);
}

int main()
{
    float *x = nullptr;
    CHECK_RT(cudaMalloc(&x, N * sizeof(float)));
    CHECK_RT(cudaMemset(x, 0, N * sizeof(float)));
    cudaStream_t stream;
    CHECK_RT(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    nvtxRangePushA("prepare");
    launch(x, stream, "prepare");
    nvtxRangePop();

    nvtxRangePushA("train");
    nvtxRangePushA("forward");
    launch(x, stream, "train/forward");
    nvtxRangePop();
    launch(x, stream, "train");
    nvtxRangePop();

    nvtxDomainHandle_t domain = nvtxDomainCreateA("mydomain");
    nvtxEventAttributes_t attributes = {};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = "block";
    nvtxDomainRangePushEx(domain, &attributes);
    launch(x, stream, "mydomain:block");
    nvtxDomainRangePop(domain);

    nvtxRangeId_t async = nvtxRangeStartA("async");
    launch(x, stream, "async");
    nvtxRangeEnd(async);
    launch(x, stream, "-");

    for (int step = 0; step < 2; step++) {
        nvtxRangePushA("step");
        launch(x, stream, "step");
        nvtxRangePop();
    }

    // Two kernels captured under "captured"; replayed twice under "replay".
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    nvtxRangePushA("captured");
    CHECK_RT(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    scale<<<N / 256, 256, 0, stream>>>(x, 1.0f, N);
    scale<<<N / 256, 256, 0, stream>>>(x, 1.0f, N);
    CHECK_RT(cudaStreamEndCapture(stream, &graph));
    nvtxRangePop();
    CHECK_RT(cudaGraphInstantiate(&exec, graph, 0));
    nvtxRangePushA("replay");
    for (int i = 0; i < 2; i++)
        CHECK_RT(cudaGraphLaunch(exec, stream));
    nvtxRangePop();
    CHECK_RT(cudaStreamSynchronize(stream));
    printf("expect graph captured\n");

    CHECK_RT(cudaGraphExecDestroy(exec));
    CHECK_RT(cudaGraphDestroy(graph));
    CHECK_RT(cudaStreamDestroy(stream));
    CHECK_RT(cudaFree(x));
    return 0;
}
