/*
 * What one interposed placement costs: ggml_backend_tensor_alloc called in a loop on real
 * ggml (the shared libraries ggml-python's wheel installs), timed inside the program so the
 * process's start and the capture's import do not count. benchmarks/capture_overhead.py
 * runs it with and without the capture library preloaded.
 *
 *     tensor_alloc_loop ROUNDS    -> prints "placements N ns_per_placement X"
 *
 * 4,096 tensors are placed ROUNDS times each, each round one slot further on, so every
 * placement leaves the tensor's struct different from the last time the capture saw it
 * (as placements in a new plan do), and the capture writes a snapshot for each.
 */
#define _POSIX_C_SOURCE 199309L
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N_TENSORS 4096
#define SLOT 64

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    struct ggml_init_params params = {ggml_tensor_overhead() * N_TENSORS, NULL, true};
    struct ggml_context *ctx = ggml_init(params);
    struct ggml_tensor *t[N_TENSORS];
    for (int i = 0; i < N_TENSORS; i++) t[i] = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, SLOT / 4);
    ggml_backend_buffer_t buffer = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), N_TENSORS * SLOT);
    char *base = ggml_backend_buffer_get_base(buffer);
    double t0 = now_s();
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < N_TENSORS; i++) {
            t[i]->buffer = NULL;
            t[i]->data = NULL;
            if (ggml_backend_tensor_alloc(buffer, t[i], base + (size_t)((i + r) % N_TENSORS) * SLOT) != GGML_STATUS_SUCCESS) {
                fprintf(stderr, "ggml_backend_tensor_alloc failed\n");
                return 1;
            }
        }
    }
    double seconds = now_s() - t0;
    long n = (long)rounds * N_TENSORS;
    printf("placements %ld ns_per_placement %.1f\n", n, seconds * 1e9 / (double)n);
    for (int i = 0; i < N_TENSORS; i++) {
        t[i]->buffer = NULL;
        t[i]->data = NULL;
    }
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    return 0;
}
