/*
 * A JAX program's kernel as XLA compiles it: before loading its module, the program writes
 * the module's optimized HLO where XLA_FLAGS' --xla_dump_to says (as XLA does when asked),
 * then launches the fusion `loop_log_fusion` (untyped pointers: f32 x, s32 index, f32 y)
 * once over N elements, x[j] = j + 1 but x[BAD] = -1, every index -1 (a NaN's bits, read
 * as float). y's allocation is twice its array, the rest all 0xff bytes (NaNs, as whatever
 * lies beyond an array in XLA's preallocated memory may be): only the array is y.
 * Usage: xla BAD. Prints `launches loop_log_fusion=1`.
 */
#include "progcommon.h"

#include <sys/stat.h>

#define N 1024

static const char hlo[] =
    "HloModule jit_f, entry_computation_layout={(f32[1024]{0}, s32[1024]{0})->f32[1024]{0}}\n"
    "\n"
    "%fused_log (param_0: f32[1024], param_1: s32[1024]) -> f32[1024] {\n"
    "  %param_0 = f32[1024]{0} parameter(0)\n"
    "  %param_1 = s32[1024]{0} parameter(1)\n"
    "  ROOT %log.1 = f32[1024]{0} log(f32[1024]{0} %param_0), "
    "metadata={op_name=\"jit(f)/jit(main)/head/log\" source_file=\"/home/u/prog.py\" "
    "source_line=12}\n"
    "}\n"
    "\n"
    "ENTRY %main.4 (x.1: f32[1024], i.2: s32[1024]) -> f32[1024] {\n"
    "  %x.1 = f32[1024]{0} parameter(0)\n"
    "  %i.2 = s32[1024]{0} parameter(1)\n"
    "  ROOT %loop_log_fusion = f32[1024]{0} fusion(%x.1, %i.2), kind=kLoop, "
    "calls=%fused_log, metadata={op_name=\"jit(f)/jit(main)/head/log\" "
    "source_file=\"/home/u/prog.py\" source_line=12}\n"
    "}\n";

/* Write the module where --xla_dump_to names, if it does. */
static void dump_module(void)
{
    const char *flags = getenv("XLA_FLAGS");
    const char *at = flags ? strstr(flags, "--xla_dump_to=") : NULL;
    if (!at)
        return;
    char dir[4096], path[4200];
    at += strlen("--xla_dump_to=");
    size_t n = strcspn(at, " ");
    if (n >= sizeof dir)
        FAIL("--xla_dump_to too long");
    memcpy(dir, at, n);
    dir[n] = '\0';
    mkdir(dir, 0777);
    snprintf(path, sizeof path, "%s/module_0001.jit_f.sm_9.0_gpu_after_optimizations.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f || fputs(hlo, f) < 0 || fclose(f) != 0)
        FAIL("cannot write %s", path);
}

int main(int argc, char **argv)
{
    if (argc != 2)
        FAIL("usage: xla BAD");
    int bad = atoi(argv[1]);
    if (bad < 0 || bad >= N)
        FAIL("BAD must be below %d", N);
    struct tally t = {0};
    dump_module();
    CUfunction fusion;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&fusion, mod, "loop_log_fusion"));
    static float x[N];
    static int index[N];
    for (int j = 0; j < N; j++) {
        x[j] = j == bad ? -1.0f : (float)(j + 1);
        index[j] = -1;
    }
    CUdeviceptr dx, di, dy;
    CHECK(cuMemAlloc_v2(&dx, sizeof x));
    CHECK(cuMemAlloc_v2(&di, sizeof index));
    CHECK(cuMemAlloc_v2(&dy, 2 * sizeof x));
    CHECK(cuMemsetD8_v2(dy, 0, sizeof x));
    CHECK(cuMemsetD8_v2(dy + sizeof x, 0xff, sizeof x));
    tally_alloc(&t, 4 * sizeof x);
    CHECK(cuMemcpyHtoD_v2(dx, x, sizeof x));
    CHECK(cuMemcpyHtoD_v2(di, index, sizeof index));
    void *args[] = {&dx, &di, &dy};
    CHECK(cuLaunchKernel(fusion, N / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    tally_launch(&t, "loop_log_fusion", 1);
    tally_print(&t);
    return 0;
}
