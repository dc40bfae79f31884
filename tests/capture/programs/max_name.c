/* A real ggml program for a ggml built with another GGML_MAX_NAME (compile it, and ggml, with
 * -DGGML_MAX_NAME=128): tensors named beyond 64 characters, planned by ggml's graph allocator
 * on the CPU buffer type (no compute: only libggml-base is needed). Exits 5 when allocated. */
#include <stdio.h>
#include <string.h>

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

int main(void) {
    struct ggml_init_params params = {ggml_tensor_overhead() * 16 + ggml_graph_overhead(), NULL, true};
    struct ggml_context *ctx = ggml_init(params);
    struct ggml_tensor *a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 64);
    ggml_set_name(a, "an input whose name is longer than the sixty-four bytes of a default build of ggml");
    ggml_set_input(a);
    struct ggml_tensor *out = ggml_scale(ctx, ggml_add(ctx, a, a), 2.0f);
    ggml_set_name(out, "out");
    ggml_set_output(out);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    if (!ggml_gallocr_alloc_graph(galloc, gf)) return 1;
    printf("GGML_MAX_NAME %d, tensor %zu bytes, name %zu chars\n", GGML_MAX_NAME, sizeof(struct ggml_tensor),
           strlen(ggml_get_name(a)));
    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    return 5;
}
