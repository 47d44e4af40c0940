"""Helpers of the host memory tests."""
import mmap

import numpy as np

PAGE = mmap.PAGESIZE


def page_buffer(pages):
    """A page-aligned float64 array over `pages` pages (plain NumPy memory,
    made aligned so that page counts are exact)."""
    raw = np.empty((pages + 1) * PAGE, np.uint8)
    start = -raw.__array_interface__["data"][0] % PAGE
    return raw[start:start + pages * PAGE].view(np.float64)
