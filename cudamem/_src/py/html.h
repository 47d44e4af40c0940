/* html.h (py/): the HTML that the types' _repr_html_ methods hand to
 * Jupyter: escaping with html.escape's rules and a table of facts. Which
 * facts a type shows is that type's file's business. */
#ifndef CMPY_HTML_H
#define CMPY_HTML_H

#include "module.h"

/* str(obj) with &, <, >, " and ' escaped as html.escape(s, quote=True)
 * does. New reference. */
PyObject *cmpy_html_escape(PyObject *obj);

/* A <table> captioned `title`, one row per labels[i] / str(values[i]),
 * then, when `pre` is not NULL, str(pre) in a <pre> block: everything
 * escaped. Takes the n references in `values`, which the callers fill
 * unchecked: a NULL one (its exception set) makes the result NULL. New
 * reference. */
PyObject *cmpy_html_table(const char *title, int n, const char *const *labels,
                          PyObject **values, PyObject *pre);

/* A byte count as "16 GiB" (four significant digits, binary units), as
 * `python -m cudamem info` prints it. New reference. */
PyObject *cmpy_html_size(unsigned long long nbytes);

#endif
