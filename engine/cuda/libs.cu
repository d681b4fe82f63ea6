/*
 * libs.cu - dlopen of cuBLAS and NCCL (see libs.cuh). The table of each is
 * filled once (pthread_once) and read-only afterwards.
 */
#include "libs.cuh"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define S_STR2(x) #x
#define S_STR(x) S_STR2(x)

/* The names dlopen tries, in order: the major version this code was compiled
 * against, then the unversioned name. The CPU emulation's headers
 * (tests/cudaemu/cublas_v2.h, nccl.h) name its stand-ins instead. */
#ifndef SWC_CUBLAS_NAMES
#define SWC_CUBLAS_NAMES "libcublas.so." S_STR(CUBLAS_VER_MAJOR), "libcublas.so"
#endif
#ifndef SWC_NCCL_NAMES
#define SWC_NCCL_NAMES "libnccl.so." S_STR(NCCL_MAJOR), "libnccl.so"
#endif

static pthread_once_t s_cublas_once = PTHREAD_ONCE_INIT;
static swc_cublas s_cublas;
static int s_cublas_ok;
static char s_cublas_why[256];

/* dlsym into a typed pointer; 0 when missing. */
template <typename F> static int s_sym(void *h, const char *name, F *out)
{
    *out = (F)dlsym(h, name);
    return *out != NULL;
}

static void s_cublas_load(void)
{
    const char *names[] = {SWC_CUBLAS_NAMES};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(s_cublas_why, sizeof s_cublas_why, "cannot open %s: %s", names[0], dlerror());
        return;
    }
    s_cublas_ok = s_sym(h, "cublasCreate_v2", &s_cublas.create) &&
                  s_sym(h, "cublasDestroy_v2", &s_cublas.destroy) &&
                  s_sym(h, "cublasSetStream_v2", &s_cublas.set_stream) &&
                  s_sym(h, "cublasGemmEx", &s_cublas.gemm_ex) &&
                  s_sym(h, "cublasGetStatusString", &s_cublas.status_string);
    if (!s_cublas_ok)
        snprintf(s_cublas_why, sizeof s_cublas_why, "%s lacks a function shardwire needs",
                 names[0]);
}

const swc_cublas *swc_cublas_get(const char **why)
{
    pthread_once(&s_cublas_once, s_cublas_load);
    if (why)
        *why = s_cublas_why;
    return s_cublas_ok ? &s_cublas : NULL;
}

#ifdef SW_HAVE_NCCL
static pthread_once_t s_nccl_once = PTHREAD_ONCE_INIT;
static swc_nccl s_nccl;
static int s_nccl_ok;
static char s_nccl_why[256];

static void s_nccl_load(void)
{
    const char *names[] = {SWC_NCCL_NAMES};
    void *h = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(s_nccl_why, sizeof s_nccl_why, "cannot open %s: %s", names[0], dlerror());
        return;
    }
    s_nccl_ok = s_sym(h, "ncclCommInitAll", &s_nccl.comm_init_all) &&
                s_sym(h, "ncclCommDestroy", &s_nccl.comm_destroy) &&
                s_sym(h, "ncclGroupStart", &s_nccl.group_start) &&
                s_sym(h, "ncclGroupEnd", &s_nccl.group_end) && s_sym(h, "ncclSend", &s_nccl.send) &&
                s_sym(h, "ncclRecv", &s_nccl.recv) &&
                s_sym(h, "ncclGetErrorString", &s_nccl.error_string);
    if (!s_nccl_ok)
        snprintf(s_nccl_why, sizeof s_nccl_why, "libnccl lacks a function shardwire needs");
}

const swc_nccl *swc_nccl_get(const char **why)
{
    pthread_once(&s_nccl_once, s_nccl_load);
    if (why)
        *why = s_nccl_why;
    return s_nccl_ok ? &s_nccl : NULL;
}
#endif
