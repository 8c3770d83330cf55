/*
 * NVTX ranges around launches, on the stand-in driver: each launch of `scale`
 * is made inside a different arrangement of ranges, and prints the scope it
 * expects cudump to give it ("expect <n> <scope names joined by '/'>", n its
 * place among this program's launches, from 1). Built against NVTX 3's
 * headers (header only: NVTX_INJECTION64_PATH names the tool).
 *
 *   1  setup                               pushed before the driver started (announced
 *                                          with the first launch that names it)
 *   2  train / forward                     nested pushes
 *   3  train                               after the inner pop
 *   4  mydomain:block                      a domain's range
 *   5  mydomain:registered                 a registered string's message
 *   6  train / async                       a start/end range opened under a push
 *   7  async                               the push popped, the start range still open
 *   8  (none)                              the start range ended
 *   9  step / step                         two pushes of one name (steps)
 *  10  mydomain:inner                      pushes of two domains interleaved: each
 *  11  (none)                              domain pops its own
 *  12  after                               a start/end range ended on another thread,
 *                                          gone at its own thread's next push
 *  13  legacy                              the older libnvToolsExt's exported call
 *                                          (the shim's, found by dlsym)
 *  then two kernel nodes captured under "captured", reported when the graph
 *  launches outside it ("expect graph captured").
 */
#include "progcommon.h"

#include <dlfcn.h>
#include <pthread.h>

#include <nvtx3/nvToolsExt.h>

#define N 64

static CUfunction scale;
static CUstream stream;
static CUdeviceptr dx;
static int n = N;
static float two = 2.0f;

static void *end_elsewhere(void *arg)
{
    nvtxRangeEnd(*(nvtxRangeId_t *)arg);
    return NULL;
}

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
    nvtxRangePushA("setup");
    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, prog_image));
    CHECK(cuModuleGetFunction(&scale, mod, "scale"));
    CHECK(cuStreamCreate(&stream, 0));
    CHECK(cuMemAlloc_v2(&dx, N * sizeof(float)));
    CHECK(cuMemsetD8_v2(dx, 0, N * sizeof(float)));

    launch("setup");
    nvtxRangePop();
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

    nvtxRangePushA("outer");
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "inner";
    nvtxDomainRangePushEx(domain, &a);
    nvtxRangePop();
    launch("mydomain:inner");
    nvtxDomainRangePop(domain);
    launch("-");

    nvtxRangeId_t handoff = nvtxRangeStartA("handoff");
    pthread_t other;
    if (pthread_create(&other, NULL, end_elsewhere, &handoff) != 0)
        FAIL("pthread_create failed");
    pthread_join(other, NULL);
    nvtxRangePushA("after");
    launch("after");
    nvtxRangePop();

    int (*legacy_push)(const char *) = NULL;
    int (*legacy_pop)(void) = NULL;
    *(void **)&legacy_push = dlsym(RTLD_DEFAULT, "nvtxRangePushA");
    *(void **)&legacy_pop = dlsym(RTLD_DEFAULT, "nvtxRangePop");
    if (!legacy_push || !legacy_pop)
        FAIL("no exported nvtxRangePushA (run under cudump)");
    /* Levels where the calls are recorded; NVTX's "not tracked" where they are only
     * forwarded (to no library here). */
    int level = legacy_push("legacy");
    launch("legacy");
    int popped = legacy_pop();
    if (popped != level || (level != 0 && level != -2))
        FAIL("the exported push and pop answered levels %d, %d", level, popped);

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
