/* npy.h (py/): NumPy's C API for the files that use it. module.c holds
 * the table, filled by the first cmpy_numpy_init (every entry point that
 * takes or makes arrays calls it). Include this, not numpy/arrayobject.h. */
#ifndef CMPY_NPY_H
#define CMPY_NPY_H

#include "module.h"

#define PY_ARRAY_UNIQUE_SYMBOL cudamem_ARRAY_API
#ifndef CMPY_NPY_IMPORT
#define NO_IMPORT_ARRAY
#endif
#include <numpy/arrayobject.h>
#include <numpy/arrayscalars.h>

/* Imports NumPy's C API once; 0 or -1 with an exception set. */
int cmpy_numpy_init(void);

#endif
