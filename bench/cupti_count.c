/*
 * A minimal CUPTI callback subscriber, for comparison: loaded with LD_PRELOAD,
 * it subscribes to the driver's launch entry points and counts launches, the
 * least a CUPTI-based tool does per launch. Prints the count at exit.
 * Built by bench/launch_overhead.py where the CUDA toolkit has CUPTI.
 */
#include <stdio.h>

#include <cupti.h>

static unsigned long long launches;
static CUpti_SubscriberHandle subscriber;

static void CUPTIAPI on_call(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                             const void *data)
{
    (void)user;
    (void)domain;
    (void)id;
    if (((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_ENTER)
        __atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void start(void)
{
    static const CUpti_CallbackId ids[] = {
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    };
    if (cuptiSubscribe(&subscriber, (CUpti_CallbackFunc)on_call, NULL) != CUPTI_SUCCESS)
        return;
    for (unsigned i = 0; i < sizeof ids / sizeof ids[0]; i++)
        cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]);
}

__attribute__((destructor)) static void stop(void)
{
    fprintf(stderr, "cupti_count: %llu launches\n", launches);
}
