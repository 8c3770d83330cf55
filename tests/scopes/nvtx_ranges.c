/*
 * NVTX ranges around launches, on the stand-in driver: each launch of `scale`
 * is made inside a different arrangement of ranges, and prints the scope it
 * expects cudump to give it ("expect <n> <scope names joined by '/'>", n its
 * place among this program's launches, from 1). Built against NVTX 3's
 * headers (header only: NVTX_INJECTION64_PATH names the tool).
 *
 *   1  outside any range
 *   2  train / forward                     nested pushes
 *   3  train                               after the inner pop
 *   4  mydomain:block                      a domain's range
 *   5  mydomain:registered                 a registered string's message
 *   6  train / async                       a start/end range opened under a push
 *   7  async                               the push popped, the start range still open
 *   8  (none)                              the start range ended
 *   9  step / step                         two pushes of one name (steps)
 *  10, 11  captured                        two kernel nodes captured under a range,
 *                                          reported when the graph launches outside it
 */
#include "progcommon.h"

#include <nvtx3/nvToolsExt.h>

#define N 64

static CUfunction scale;
static CUstream stream;
static CUdeviceptr dx;
static int n = N;
static float two = 2.0f;

static void launch(const char *expect)
{
    static int count;
    void *args[] = {&dx, &two, &n};
    CHECK(cuLaunchKernel(scale, 1, 1, 1, N, 1, 1, 0, stream, args, NULL));
    printf("expect %d %s\n", ++count, expect);
}

int main(void)
{
    CUcontext ctx;
    CUmodule mod;
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));
    CHECK(cuStreamCreate(&stream, 0));
    CHECK(cuMemAlloc_v2(&dx, N * sizeof(float)));
    CHECK(cuMemsetD8_v2(dx, 0, N * sizeof(float)));

    launch("-");
    nvtxRangePushA("train");
    nvtxRangePushA("forward");
    launch("train/forward");
    nvtxRangePop();
    launch("train");
    nvtxRangePop();

    nvtxDomainHandle_t domain = nvtxDomainCreateA("mydomain");
    nvtxEventAttributes_t a = {0};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "block";
    nvtxDomainRangePushEx(domain, &a);
    launch("mydomain:block");
    nvtxDomainRangePop(domain);
    nvtxStringHandle_t registered = nvtxDomainRegisterStringA(domain, "registered");
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = registered;
    nvtxDomainRangePushEx(domain, &a);
    launch("mydomain:registered");
    nvtxDomainRangePop(domain);

    nvtxRangePushA("train");
    nvtxRangeId_t id = nvtxRangeStartA("async");
    launch("train/async");
    nvtxRangePop();
    launch("async");
    nvtxRangeEnd(id);
    launch("-");

    nvtxRangePushA("step");
    nvtxRangePop();
    nvtxRangePushA("step");
    launch("step");
    nvtxRangePop();

    nvtxRangePushA("captured");
    CHECK(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_GLOBAL));
    void *args[] = {&dx, &two, &n};
    CHECK(cuLaunchKernel(scale, 1, 1, 1, N, 1, 1, 0, stream, args, NULL));
    CHECK(cuLaunchKernel(scale, 1, 1, 1, N, 1, 1, 0, stream, args, NULL));
    CUgraph graph;
    CHECK(cuStreamEndCapture(stream, &graph));
    nvtxRangePop();
    CUgraphExec exec;
    CHECK(cuGraphInstantiateWithFlags(&exec, graph, 0));
    CHECK(cuGraphLaunch(exec, stream));
    printf("expect graph captured\n");
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
    CHECK(cuMemFree_v2(dx));
    return 0;
}
