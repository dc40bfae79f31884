/* Where ggml's graph allocator puts a CLAMP node: ggml 0.25.3 and later let it take over its
 * source's bytes (ggml_op_can_inplace), older versions give it bytes of its own. Built by
 * tests/conformance/test_versions.py against several ggml versions; prints the offsets real
 * ggml chose and the computed values, then exits 0. */
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#define N 64

int main(void) {
    struct ggml_init_params params = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
    struct ggml_context * ctx = ggml_init(params);
    struct ggml_tensor * x = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N);
    ggml_set_name(x, "x");
    ggml_set_input(x);
    struct ggml_tensor * sq = ggml_sqr(ctx, x);
    ggml_set_name(sq, "sq");
    struct ggml_tensor * cl = ggml_clamp(ctx, sq, 0.0f, 4.0f);
    ggml_set_name(cl, "clamped");
    struct ggml_tensor * out = ggml_scale(ctx, cl, 0.5f);
    ggml_set_name(out, "out");
    ggml_set_output(out);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);

    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    if (!ggml_gallocr_alloc_graph(galloc, gf)) {
        fprintf(stderr, "alloc_graph failed\n");
        return 1;
    }
    float in[N];
    for (int i = 0; i < N; i++) in[i] = (float)(i % 7) - 3.0f;
    ggml_backend_tensor_set(x, in, 0, sizeof in);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    if (ggml_backend_graph_compute(cpu, gf) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "compute failed\n");
        return 1;
    }
    float res[N];
    ggml_backend_tensor_get(out, res, 0, sizeof res);
    char * base = (char *) ggml_backend_buffer_get_base(sq->buffer);
    printf("ggml %s\n", ggml_version());
    printf("offset sq %td clamped %td out %td\n", (char *) sq->data - base, (char *) cl->data - base,
           (char *) out->data - base);
    double sum = 0;
    for (int i = 0; i < N; i++) sum += res[i];
    printf("sum %.3f\n", sum);
    ggml_backend_free(cpu);
    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    return 0;
}
