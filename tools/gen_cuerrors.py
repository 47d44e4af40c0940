"""Regenerates cudamem/_src/core/cuerrors.h from the CUDA headers' cuda.h."""
import re
import sys

HEADER = """/* cuerrors.h: every CUresult of the CUDA 13 headers and the sticky ones, as
 * X-macros, so core and the simulator share one table. Generated from cuda.h
 * by tools/gen_cuerrors.py; regenerate when the headers gain codes. */
#ifndef CM_CUERRORS_H
#define CM_CUERRORS_H

#define CM_CUDA_ERRORS(X) \\
"""


# The codes cuda.h documents as leaving the context (or process) unusable:
# every later call fails until the process restarts or the context resets.
STICKY = """
/* The sticky codes: after one, the context is unusable. */
#define CM_CUDA_STICKY_ERRORS(X) \\
    X(CUDA_ERROR_ECC_UNCORRECTABLE) \\
    X(CUDA_ERROR_NVLINK_UNCORRECTABLE) \\
    X(CUDA_ERROR_CONTAINED) \\
    X(CUDA_ERROR_ILLEGAL_ADDRESS) \\
    X(CUDA_ERROR_LAUNCH_TIMEOUT) \\
    X(CUDA_ERROR_ASSERT) \\
    X(CUDA_ERROR_HARDWARE_STACK_ERROR) \\
    X(CUDA_ERROR_ILLEGAL_INSTRUCTION) \\
    X(CUDA_ERROR_MISALIGNED_ADDRESS) \\
    X(CUDA_ERROR_INVALID_ADDRESS_SPACE) \\
    X(CUDA_ERROR_INVALID_PC) \\
    X(CUDA_ERROR_LAUNCH_FAILED) \\
    X(CUDA_ERROR_TENSOR_MEMORY_LEAK) \\
    X(CUDA_ERROR_MPS_CLIENT_TERMINATED) \\
    X(CUDA_ERROR_EXTERNAL_DEVICE)
"""


def main(cuda_h, out):
    with open(cuda_h) as f:
        src = f.read()
    body = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;",
                     src, re.S).group(1)
    rows = re.findall(r"\b(CUDA_(?:SUCCESS|ERROR_\w+))\s*=\s*(\d+)", body)
    lines = ["    X(%s, %s)" % row for row in rows]
    with open(out, "w") as f:
        f.write(HEADER + " \\\n".join(lines) + "\n" + STICKY + "\n#endif\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
