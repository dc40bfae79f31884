/* Places one tensor through the fake ggml and exits with 7. */
#include <stdio.h>
int ggml_backend_tensor_alloc(void *buffer, void *tensor, void *addr);
int main(void) {
    static char tensor[400], memory[64];
    int status = ggml_backend_tensor_alloc(NULL, tensor, memory);
    printf("placed: %d\n", status);
    return 7;
}
