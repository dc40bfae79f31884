/* Places one tensor through the fake ggml and exits with 7 (or aborts, given "abort"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int ggml_backend_tensor_alloc(void *buffer, void *tensor, void *addr);
int main(int argc, char **argv) {
    static char tensor[400], memory[64];
    int status = ggml_backend_tensor_alloc(NULL, tensor, memory);
    printf("placed: %d\n", status);
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "abort") == 0) abort();
    return 7;
}
