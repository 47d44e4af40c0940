"""Regenerates cudamem/_src/core/cuattrs.h from the CUDA headers' cuda.h.

Usage: python tools/gen_cuattrs.py /usr/local/cuda/include/cuda.h \
    cudamem/_src/core/cuattrs.h
"""
import re
import sys

HEADER = """/* cuattrs.h: every CU_DEVICE_ATTRIBUTE_* in CUDA 13's cuda.h (but
 * CU_DEVICE_ATTRIBUTE_MAX), as an X-macro of the name without its prefix and
 * the value, so py/ can read any attribute by name (dev.WARP_SIZE).
 * Generated from cuda.h by tools/gen_cuattrs.py; regenerate with the
 * headers. */
#ifndef CM_CUATTRS_H
#define CM_CUATTRS_H

#define CM_CUDA_ATTRIBUTES(X) \\
"""


def main(cuda_h, out):
    with open(cuda_h) as f:
        src = f.read()
    body = re.search(r"typedef enum CUdevice_attribute_enum \{(.*?)\} "
                     r"CUdevice_attribute;", src, re.S).group(1)
    rows = re.findall(r"\bCU_DEVICE_ATTRIBUTE_(\w+)\s*=\s*(\d+)", body)
    rows = [row for row in rows if row[0] != "MAX"]
    lines = ["    X(%s, %s)" % row for row in rows]
    with open(out, "w") as f:
        f.write(HEADER + " \\\n".join(lines) + "\n\n#endif\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
