/*
 * A model's layers in miniature: one kernel whose launches differ from layer to
 * layer (its weights), then one whose launches are the same in every layer
 * (over the same activations), LAYERS times a step, STEPS steps, with nothing
 * between the launches. Each layer i runs
 *   vecAdd(w[i], act, tmp, N)       tmp = w[i] + act   (w[i][j] = -(i + 1 + j / N) / (L + 1))
 *   square(tmp, act, N)             act = tmp * tmp    (the same bytes in every layer)
 * so the launch after a square is another one in each layer (act stays within [0, 1]).
 * Usage: layers LAYERS STEPS
 * Prints `sum S` (act's sum at the end), then `launches vecAdd=L*S square=L*S`.
 */
#include "progcommon.h"

#define N 1024
#define MAX_LAYERS 16

int main(int argc, char **argv)
{
    if (argc != 3)
        FAIL("usage: layers LAYERS STEPS");
    int layers = atoi(argv[1]), steps = atoi(argv[2]);
    if (layers < 1 || layers > MAX_LAYERS || steps < 1)
        FAIL("LAYERS from 1 to %d, STEPS at least 1", MAX_LAYERS);
    struct tally t = {0};
    CUfunction add, square;
    CUmodule mod = prog_start();
    CHECK(cuModuleGetFunction(&add, mod, "_Z6vecAddPKfS0_Pfi"));
    CHECK(cuModuleGetFunction(&square, mod, "_Z6squarePKfPfi"));
    static float host[N];
    CUdeviceptr w[MAX_LAYERS], act, tmp;
    for (int i = 0; i < layers; i++) {
        for (int j = 0; j < N; j++)
            host[j] = -((float)(i + 1) + (float)j / N) / (float)(layers + 1);
        CHECK(cuMemAlloc_v2(&w[i], sizeof host));
        tally_alloc(&t, sizeof host);
        CHECK(cuMemcpyHtoD_v2(w[i], host, sizeof host));
    }
    CHECK(cuMemAlloc_v2(&act, sizeof host));
    CHECK(cuMemAlloc_v2(&tmp, sizeof host));
    CHECK(cuMemsetD8_v2(act, 0, sizeof host));
    tally_alloc(&t, sizeof host);
    tally_alloc(&t, sizeof host);
    int n = N;
    void *square_args[] = {&tmp, &act, &n};
    for (int k = 0; k < steps; k++)
        for (int i = 0; i < layers; i++) {
            void *add_args[] = {&w[i], &act, &tmp, &n};
            CHECK(cuLaunchKernel(add, N / 128, 1, 1, 128, 1, 1, 0, NULL, add_args, NULL));
            CHECK(cuLaunchKernel(square, N / 128, 1, 1, 128, 1, 1, 0, NULL, square_args, NULL));
        }
    prog_print_sum(act, host, N);
    tally_launch(&t, "vecAdd", (unsigned long)(layers * steps));
    tally_launch(&t, "square", (unsigned long)(layers * steps));
    tally_print(&t);
    return 0;
}
