/* gpu_alloc NAME MIB: declares server NAME (model_server) through the C ABI,
 * then forks a child that allocates MIB MiB of GPU memory through the CUDA
 * driver API (libcuda.so.1, loaded with dlopen: no toolkit needed), prints
 * "allocated <child pid>" and waits to be killed. For scripts/gpu-check.sh. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "gym_metrics.h"

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef unsigned long long CUdeviceptr;

static void* need(void* lib, const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "gpu_alloc: libcuda.so.1 has no %s\n", name);
    exit(1);
  }
  return f;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: gpu_alloc NAME MIB\n");
    return 2;
  }
  if (gym_declare_server(argv[1], "model_server") != GYM_OK) {
    fprintf(stderr, "gpu_alloc: cannot declare the server\n");
    return 1;
  }
  int ready[2];
  if (pipe(ready) != 0) return 1;
  pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    void* lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (lib == NULL) {
      fprintf(stderr, "gpu_alloc: %s\n", dlerror());
      _exit(1);
    }
    CUresult (*init)(unsigned) = (CUresult(*)(unsigned))need(lib, "cuInit");
    CUresult (*device)(CUdevice*, int) = (CUresult(*)(CUdevice*, int))need(lib, "cuDeviceGet");
    CUresult (*context)(CUcontext*, unsigned, CUdevice) =
        (CUresult(*)(CUcontext*, unsigned, CUdevice))need(lib, "cuCtxCreate_v2");
    CUresult (*alloc)(CUdeviceptr*, size_t) =
        (CUresult(*)(CUdeviceptr*, size_t))need(lib, "cuMemAlloc_v2");
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr ptr;
    CUresult r;
    if ((r = init(0)) != 0 || (r = device(&dev, 0)) != 0 || (r = context(&ctx, 0, dev)) != 0 ||
        (r = alloc(&ptr, (size_t)atol(argv[2]) << 20)) != 0) {
      fprintf(stderr, "gpu_alloc: CUDA error %d\n", r);
      _exit(1);
    }
    char c = 'r';
    if (write(ready[1], &c, 1) != 1) _exit(1);
    for (;;) pause();
  }
  char c;
  if (read(ready[0], &c, 1) != 1) {
    fprintf(stderr, "gpu_alloc: the child could not allocate\n");
    return 1;
  }
  printf("allocated %d\n", (int)child);
  fflush(stdout);
  for (;;) pause();
}
