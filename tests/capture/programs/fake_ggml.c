/* A stand-in "ggml" whose struct ggml_tensor is not the layout vizalloc knows (its
 * ggml_tensor_overhead says so), built as libggml-base.so for tests: the capture must
 * refuse to read its tensors and say which version it found. */
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifndef TENSOR_BYTES
#define TENSOR_BYTES 400
#endif

const char *ggml_version(void) { return "9.9.9"; }
const char *ggml_commit(void) { return "fake"; }
size_t ggml_tensor_overhead(void) { return 32 + TENSOR_BYTES; }
size_t ggml_nbytes(const void *t) { (void)t; return 0; }
const char *ggml_get_name(const void *t) { return (const char *)t; }
int64_t ggml_blck_size(int type) { (void)type; return 1; }
size_t ggml_type_size(int type) { (void)type; return 4; }
const char *ggml_type_name(int type) { (void)type; return "f32"; }
const char *ggml_op_name(int op) { (void)op; return "NONE"; }
int ggml_graph_n_nodes(void *g) { (void)g; return 0; }
void **ggml_graph_nodes(void *g) { (void)g; return NULL; }
int ggml_graph_size(void *g) { (void)g; return 0; }
void *ggml_backend_buffer_get_base(void *b) { return b; }
size_t ggml_backend_buffer_get_size(void *b) { (void)b; return 0; }
void *ggml_backend_buffer_get_type(void *b) { (void)b; return NULL; }
const char *ggml_backend_buft_name(void *b) { (void)b; return "FAKE"; }
size_t ggml_backend_buft_get_alignment(void *b) { (void)b; return 32; }
size_t ggml_backend_buft_get_max_size(void *b) { (void)b; return (size_t)-1; }
int ggml_backend_tensor_alloc(void *buffer, void *tensor, void *addr) {
    (void)buffer;
    ((void **)tensor)[31] = addr; /* the fake's own bookkeeping, somewhere inside its struct */
    return 0;
}
