/* A CUDA process for tests/gpu/top.sh: `cuda-hold MIB SECONDS` allocates MIB MiB on GPU 0
 * through the driver API (libcuda.so.1, loaded at run time: no CUDA toolkit is needed to
 * build it), says "holding MIB MiB" on stdout, and holds it for SECONDS (or until killed).
 * Exits 1 with the failing call's name and CUresult when CUDA refuses. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*cu_init)(unsigned int);
typedef int (*cu_device_get)(int *, int);
typedef int (*cu_ctx_create)(void **, unsigned int, int);
typedef int (*cu_mem_alloc)(unsigned long long *, size_t);

static void *symbol(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (f == NULL) {
        fprintf(stderr, "cuda-hold: libcuda.so.1 has no %s\n", name);
        exit(1);
    }
    return f;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: cuda-hold MIB SECONDS\n");
        return 2;
    }
    size_t mib = strtoul(argv[1], NULL, 10);
    unsigned int seconds = (unsigned int)strtoul(argv[2], NULL, 10);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "cuda-hold: %s\n", dlerror());
        return 1;
    }
    int device, r;
    void *ctx;
    unsigned long long ptr;
    if ((r = ((cu_init)symbol(lib, "cuInit"))(0)) != 0) {
        fprintf(stderr, "cuda-hold: cuInit: %d\n", r);
        return 1;
    }
    if ((r = ((cu_device_get)symbol(lib, "cuDeviceGet"))(&device, 0)) != 0) {
        fprintf(stderr, "cuda-hold: cuDeviceGet: %d\n", r);
        return 1;
    }
    if ((r = ((cu_ctx_create)symbol(lib, "cuCtxCreate_v2"))(&ctx, 0, device)) != 0) {
        fprintf(stderr, "cuda-hold: cuCtxCreate_v2: %d\n", r);
        return 1;
    }
    if ((r = ((cu_mem_alloc)symbol(lib, "cuMemAlloc_v2"))(&ptr, mib << 20)) != 0) {
        fprintf(stderr, "cuda-hold: cuMemAlloc_v2: %d\n", r);
        return 1;
    }
    printf("holding %zu MiB\n", mib);
    fflush(stdout);
    sleep(seconds);
    return 0;
}
