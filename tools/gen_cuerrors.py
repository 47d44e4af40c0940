"""Regenerates cudamem/_src/core/cuerrors.h from the CUDA headers' cuda.h."""
import re
import sys

HEADER = """/* cuerrors.h: every CUresult of the CUDA 13 headers, as an X-macro, so core
 * and the simulator share one table of names. Generated from cuda.h by
 * tools/gen_cuerrors.py; regenerate when the headers gain codes. */
#ifndef CM_CUERRORS_H
#define CM_CUERRORS_H

#define CM_CUDA_ERRORS(X) \\
"""


def main(cuda_h, out):
    src = open(cuda_h).read()
    body = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;",
                     src, re.S).group(1)
    rows = re.findall(r"\b(CUDA_(?:SUCCESS|ERROR_\w+))\s*=\s*(\d+)", body)
    lines = ["    X(%s, %s)" % row for row in rows]
    with open(out, "w") as f:
        f.write(HEADER + " \\\n".join(lines) + "\n\n#endif\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
