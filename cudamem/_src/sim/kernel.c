/* kernel.c: the module, library, linker, launch, occupancy and function
 * entry points of a driver that cannot run device code: each is exported
 * and found by cuGetProcAddress, checks what it is given, and fails with
 * a documented error, so that a client learns at the call that kernels do
 * not run here instead of finding no symbol. Not memory, copies or
 * streams (memory.c, copy.c, stream.c). */
#include "sim.h"

#include <stddef.h>

/* Loading an image needs the JIT compiler (PTX) or a GPU to run it on:
 * the cuModuleLoad* family documents CUDA_ERROR_JIT_COMPILER_NOT_FOUND. */
#define SIM_NO_JIT CUDA_ERROR_JIT_COMPILER_NOT_FOUND
/* Everything else that needs device code (cuLibraryLoad* document it). */
#define SIM_NO_KERNELS CUDA_ERROR_NOT_SUPPORTED

/* The calls that act in the current context check it first, as the
 * driver does; `out` (may be NULL) is cleared so that no caller reads a
 * stale handle. */
static CUresult
in_context(void *out, size_t size)
{
    CUcontext ctx;
    if (out != NULL) {
        unsigned char *p = out;
        for (size_t i = 0; i < size; i++)
            p[i] = 0;
    }
    sim_lock();
    CUresult r = sim_ctx_get(&ctx);
    sim_unlock();
    return r;
}

#define NEED(ptr)                                                             \
    do {                                                                      \
        if ((ptr) == NULL)                                                    \
            return CUDA_ERROR_INVALID_VALUE;                                  \
    } while (0)

/* Loads in the current context: CUDA_ERROR_JIT_COMPILER_NOT_FOUND. */
static CUresult
no_load(void *out, size_t size, const void *image)
{
    NEED(out);
    CUresult r = in_context(out, size);
    if (r != CUDA_SUCCESS)
        return r;
    NEED(image);
    return SIM_NO_JIT;
}

/* ---------------------------------------------------------------------------
 * Modules. */

SIM_EXPORT CUresult CUDAAPI
cuModuleLoadDataEx(CUmodule *module, const void *image,
                   unsigned int numOptions, CUjit_option *options,
                   void **optionValues)
{
    SIM_ENTER(cuModuleLoadDataEx);
    if (numOptions > 0 && (options == NULL || optionValues == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    return no_load(module, sizeof(*module), image);
}

/* No module, function, kernel, library or link state is ever made; what
 * takes one says that this driver runs no device code. */
SIM_EXPORT CUresult CUDAAPI
cuModuleUnload(CUmodule hmod)
{
    SIM_ENTER(cuModuleUnload);
    (void)hmod;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    SIM_ENTER(cuModuleGetFunction);
    NEED(hfunc);
    NEED(name);
    (void)hmod;
    *hfunc = NULL;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
                  const char *name)
{
    SIM_ENTER(cuModuleGetGlobal);
    NEED(name);
    (void)hmod;
    (void)dptr;
    (void)bytes;
    return SIM_NO_KERNELS;
}

/* ---------------------------------------------------------------------------
 * Libraries (context-independent loading, CUDA 12). cuLibraryLoad*
 * document CUDA_ERROR_NOT_SUPPORTED. */

static CUresult
library_load(CUlibrary *library, const void *code, unsigned numJitOptions,
             CUjit_option *jitOptions, void **jitOptionsValues,
             unsigned numLibraryOptions, CUlibraryOption *libraryOptions,
             void **libraryOptionValues)
{
    NEED(library);
    *library = NULL;
    NEED(code);
    if ((numJitOptions > 0 && (!jitOptions || !jitOptionsValues)) ||
        (numLibraryOptions > 0 && (!libraryOptions || !libraryOptionValues)))
        return CUDA_ERROR_INVALID_VALUE;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLibraryUnload(CUlibrary library)
{
    SIM_ENTER(cuLibraryUnload);
    (void)library;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
    SIM_ENTER(cuLibraryGetKernel);
    NEED(pKernel);
    NEED(name);
    (void)library;
    *pKernel = NULL;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
    SIM_ENTER(cuLibraryGetModule);
    NEED(pMod);
    (void)library;
    *pMod = NULL;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
    SIM_ENTER(cuKernelGetFunction);
    NEED(pFunc);
    (void)kernel;
    *pFunc = NULL;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel,
                     CUdevice dev)
{
    SIM_ENTER(cuKernelGetAttribute);
    NEED(pi);
    (void)attrib;
    (void)kernel;
    (void)dev;
    return SIM_NO_KERNELS;
}

/* ---------------------------------------------------------------------------
 * The JIT linker. */

SIM_EXPORT CUresult CUDAAPI
cuLinkCreate(unsigned int numOptions, CUjit_option *options,
             void **optionValues, CUlinkState *stateOut)
{
    SIM_ENTER(cuLinkCreate);
    NEED(stateOut);
    *stateOut = NULL;
    if (numOptions > 0 && (options == NULL || optionValues == NULL))
        return CUDA_ERROR_INVALID_VALUE;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
              const char *name, unsigned int numOptions, CUjit_option *options,
              void **optionValues)
{
    SIM_ENTER(cuLinkAddData);
    (void)state, (void)type, (void)data, (void)size, (void)name;
    (void)numOptions, (void)options, (void)optionValues;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
              unsigned int numOptions, CUjit_option *options,
              void **optionValues)
{
    SIM_ENTER(cuLinkAddFile);
    (void)state, (void)type, (void)path;
    (void)numOptions, (void)options, (void)optionValues;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
    SIM_ENTER(cuLinkComplete);
    (void)state, (void)cubinOut, (void)sizeOut;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLinkDestroy(CUlinkState state)
{
    SIM_ENTER(cuLinkDestroy);
    (void)state;
    return SIM_NO_KERNELS;
}

/* ---------------------------------------------------------------------------
 * Launches: in the current context, of a function no module gave. */

static CUresult
launch(CUfunction f)
{
    CUresult r = in_context(NULL, 0);
    if (r != CUDA_SUCCESS)
        return r;
    (void)f;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
               unsigned int gridDimZ, unsigned int blockDimX,
               unsigned int blockDimY, unsigned int blockDimZ,
               unsigned int sharedMemBytes, CUstream hStream,
               void **kernelParams, void **extra)
{
    SIM_ENTER(cuLaunchKernel);
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX;
    (void)blockDimY, (void)blockDimZ, (void)sharedMemBytes, (void)hStream;
    (void)kernelParams, (void)extra;
    return launch(f);
}

SIM_EXPORT CUresult CUDAAPI
cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                    unsigned int gridDimZ, unsigned int blockDimX,
                    unsigned int blockDimY, unsigned int blockDimZ,
                    unsigned int sharedMemBytes, CUstream hStream,
                    void **kernelParams, void **extra)
{
    SIM_ENTER(cuLaunchKernel);
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX;
    (void)blockDimY, (void)blockDimZ, (void)sharedMemBytes, (void)hStream;
    (void)kernelParams, (void)extra;
    return launch(f);
}

SIM_EXPORT CUresult CUDAAPI
cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                 void **kernelParams, void **extra)
{
    SIM_ENTER(cuLaunchKernelEx);
    NEED(config);
    (void)kernelParams, (void)extra;
    return launch(f);
}

SIM_EXPORT CUresult CUDAAPI
cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                      void **kernelParams, void **extra)
{
    SIM_ENTER(cuLaunchKernelEx);
    NEED(config);
    (void)kernelParams, (void)extra;
    return launch(f);
}

SIM_EXPORT CUresult CUDAAPI
cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                          unsigned int gridDimY, unsigned int gridDimZ,
                          unsigned int blockDimX, unsigned int blockDimY,
                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                          CUstream hStream, void **kernelParams)
{
    SIM_ENTER(cuLaunchCooperativeKernel);
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX;
    (void)blockDimY, (void)blockDimZ, (void)sharedMemBytes, (void)hStream;
    (void)kernelParams;
    return launch(f);
}

SIM_EXPORT CUresult CUDAAPI
cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                               unsigned int gridDimY, unsigned int gridDimZ,
                               unsigned int blockDimX, unsigned int blockDimY,
                               unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream,
                               void **kernelParams)
{
    SIM_ENTER(cuLaunchCooperativeKernel);
    (void)gridDimX, (void)gridDimY, (void)gridDimZ, (void)blockDimX;
    (void)blockDimY, (void)blockDimZ, (void)sharedMemBytes, (void)hStream;
    (void)kernelParams;
    return launch(f);
}

/* ---------------------------------------------------------------------------
 * Occupancy and function attributes: of functions that cannot exist. */

SIM_EXPORT CUresult CUDAAPI
cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func,
                                            int blockSize,
                                            size_t dynamicSMemSize)
{
    SIM_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessor);
    NEED(numBlocks);
    (void)func, (void)blockSize, (void)dynamicSMemSize;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
                                                     CUfunction func,
                                                     int blockSize,
                                                     size_t dynamicSMemSize,
                                                     unsigned int flags)
{
    SIM_ENTER(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags);
    NEED(numBlocks);
    (void)func, (void)blockSize, (void)dynamicSMemSize, (void)flags;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize,
                                 CUfunction func,
                                 CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                 size_t dynamicSMemSize, int blockSizeLimit)
{
    SIM_ENTER(cuOccupancyMaxPotentialBlockSize);
    NEED(minGridSize);
    NEED(blockSize);
    (void)func, (void)blockSizeToDynamicSMemSize, (void)dynamicSMemSize;
    (void)blockSizeLimit;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuOccupancyMaxPotentialBlockSizeWithFlags(
    int *minGridSize, int *blockSize, CUfunction func,
    CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
    int blockSizeLimit, unsigned int flags)
{
    SIM_ENTER(cuOccupancyMaxPotentialBlockSizeWithFlags);
    NEED(minGridSize);
    NEED(blockSize);
    (void)func, (void)blockSizeToDynamicSMemSize, (void)dynamicSMemSize;
    (void)blockSizeLimit, (void)flags;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
                                        CUfunction func, int numBlocks,
                                        int blockSize)
{
    SIM_ENTER(cuOccupancyAvailableDynamicSMemPerBlock);
    NEED(dynamicSmemSize);
    (void)func, (void)numBlocks, (void)blockSize;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    SIM_ENTER(cuFuncGetAttribute);
    NEED(pi);
    (void)attrib, (void)hfunc;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
    SIM_ENTER(cuFuncSetAttribute);
    (void)hfunc, (void)attrib, (void)value;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
    SIM_ENTER(cuFuncSetCacheConfig);
    (void)hfunc, (void)config;
    return SIM_NO_KERNELS;
}

SIM_EXPORT CUresult CUDAAPI
cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
    SIM_ENTER(cuFuncGetModule);
    NEED(hmod);
    (void)hfunc;
    return SIM_NO_KERNELS;
}

/* ---------------------------------------------------------------------------
 * Entry points: one row per exported ABI alias (see SIM_ALIAS_WRAPPER in
 * sim.h); the wrappers of the W rows, then the cuGetProcAddress rows. */

/* clang-format off */
#define KERNEL_ALIASES(W, R)                                                  \
    W(cuModuleLoad, cuModuleLoad, 2000, , no_load,                            \
      (CUmodule *module, const char *fname),                                  \
      (module, sizeof(*module), fname))                                       \
    W(cuModuleLoadData, cuModuleLoadData, 2000, , no_load,                    \
      (CUmodule *module, const void *image),                                  \
      (module, sizeof(*module), image))                                       \
    R(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, )                         \
    W(cuModuleLoadFatBinary, cuModuleLoadFatBinary, 2000, , no_load,          \
      (CUmodule *module, const void *fatCubin),                               \
      (module, sizeof(*module), fatCubin))                                    \
    R(cuModuleUnload, cuModuleUnload, 2000, )                                 \
    R(cuModuleGetFunction, cuModuleGetFunction, 2000, )                       \
    R(cuModuleGetGlobal_v2, cuModuleGetGlobal, 3020, )                        \
    W(cuLibraryLoadData, cuLibraryLoadData, 12000, , library_load,            \
      (CUlibrary *library, const void *code, CUjit_option *jitOptions,        \
      void **jitOptionsValues, unsigned int numJitOptions,                    \
      CUlibraryOption *libraryOptions, void **libraryOptionValues,            \
      unsigned int numLibraryOptions), (library, code, numJitOptions,         \
      jitOptions, jitOptionsValues, numLibraryOptions, libraryOptions,        \
      libraryOptionValues))                                                   \
    W(cuLibraryLoadFromFile, cuLibraryLoadFromFile, 12000, , library_load,    \
      (CUlibrary *library, const char *fileName, CUjit_option *jitOptions,    \
      void **jitOptionsValues, unsigned int numJitOptions,                    \
      CUlibraryOption *libraryOptions, void **libraryOptionValues,            \
      unsigned int numLibraryOptions), (library, fileName, numJitOptions,     \
      jitOptions, jitOptionsValues, numLibraryOptions, libraryOptions,        \
      libraryOptionValues))                                                   \
    R(cuLibraryUnload, cuLibraryUnload, 12000, )                              \
    R(cuLibraryGetKernel, cuLibraryGetKernel, 12000, )                        \
    R(cuLibraryGetModule, cuLibraryGetModule, 12000, )                        \
    R(cuKernelGetFunction, cuKernelGetFunction, 12000, )                      \
    R(cuKernelGetAttribute, cuKernelGetAttribute, 12000, )                    \
    R(cuLinkCreate_v2, cuLinkCreate, 6050, )                                  \
    R(cuLinkAddData_v2, cuLinkAddData, 6050, )                                \
    R(cuLinkAddFile_v2, cuLinkAddFile, 6050, )                                \
    R(cuLinkComplete, cuLinkComplete, 5050, )                                 \
    R(cuLinkDestroy, cuLinkDestroy, 5050, )                                   \
    R(cuLaunchKernel, cuLaunchKernel, 4000, )                                 \
    R(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, _ptsz)                       \
    R(cuLaunchKernelEx, cuLaunchKernelEx, 11060, )                            \
    R(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, _ptsz)                  \
    R(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, )           \
    R(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, _ptsz) \
    R(cuOccupancyMaxActiveBlocksPerMultiprocessor,                            \
      cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, )                    \
    R(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,                   \
      cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000, )           \
    R(cuOccupancyMaxPotentialBlockSize, cuOccupancyMaxPotentialBlockSize,     \
      6050, )                                                                 \
    R(cuOccupancyMaxPotentialBlockSizeWithFlags,                              \
      cuOccupancyMaxPotentialBlockSizeWithFlags, 7000, )                      \
    R(cuOccupancyAvailableDynamicSMemPerBlock,                                \
      cuOccupancyAvailableDynamicSMemPerBlock, 10020, )                       \
    R(cuFuncGetAttribute, cuFuncGetAttribute, 2020, )                         \
    R(cuFuncSetAttribute, cuFuncSetAttribute, 9000, )                         \
    R(cuFuncSetCacheConfig, cuFuncSetCacheConfig, 3000, )                     \
    R(cuFuncGetModule, cuFuncGetModule, 11000, )

KERNEL_ALIASES(SIM_ALIAS_WRAPPER, SIM_ALIAS_SKIP)

const sim_proc sim_procs_kernel[] = {
    KERNEL_ALIASES(SIM_ALIAS_ROW, SIM_ALIAS_ROW)
};
/* clang-format on */
const size_t sim_nprocs_kernel = sizeof(sim_procs_kernel) / sizeof(sim_proc);
