/* html.c (py/): escaping and the one table layout behind every
 * _repr_html_ (html.h). No type's facts are chosen here. */
#include "html.h"

PyObject *
cmpy_html_escape(PyObject *obj)
{
    /* '&' first, so that the entities added later are not escaped. */
    static const char *const from[] = {"&", "<", ">", "\"", "'"};
    static const char *const to[] = {"&amp;", "&lt;", "&gt;", "&quot;",
                                     "&#x27;"};
    PyObject *text = PyObject_Str(obj);

    for (int i = 0; text != NULL && i < 5; i++) {
        PyObject *f = PyUnicode_FromString(from[i]);
        PyObject *t = PyUnicode_FromString(to[i]);
        PyObject *next = NULL;

        if (f != NULL && t != NULL) {
            next = PyUnicode_Replace(text, f, t, -1);
        }
        Py_XDECREF(f);
        Py_XDECREF(t);
        Py_SETREF(text, next);
    }
    return text;
}

/* Appends `piece` (a new reference, or NULL after an error) to `parts`
 * and drops it; 0 or -1. */
static int
append(PyObject *parts, PyObject *piece)
{
    int rc;

    if (piece == NULL) {
        return -1;
    }
    rc = PyList_Append(parts, piece);
    Py_DECREF(piece);
    return rc;
}

PyObject *
cmpy_html_table(const char *title, int n, const char *const *labels,
                PyObject **values, PyObject *pre)
{
    PyObject *parts = NULL, *text = NULL, *out = NULL, *sep;

    for (int i = 0; i < n; i++) {
        if (values[i] == NULL) {
            goto done;
        }
    }
    if ((parts = PyList_New(0)) == NULL ||
        (text = PyUnicode_FromString(title)) == NULL) {
        goto done;
    }
    Py_SETREF(text, cmpy_html_escape(text));
    if (text == NULL ||
        append(parts, PyUnicode_FromFormat(
                          "<table class=\"cudamem\"><caption style=\""
                          "text-align:left\"><b>%U</b></caption>",
                          text)) < 0) {
        goto done;
    }
    for (int i = 0; i < n; i++) {
        PyObject *label = PyUnicode_FromString(labels[i]), *row = NULL;
        PyObject *elabel = label != NULL ? cmpy_html_escape(label) : NULL;
        PyObject *evalue = elabel != NULL ? cmpy_html_escape(values[i]) : NULL;

        if (evalue != NULL) {
            row = PyUnicode_FromFormat(
                "<tr><th style=\"text-align:left\">%U</th>"
                "<td style=\"text-align:left\">%U</td></tr>",
                elabel, evalue);
        }
        Py_XDECREF(label);
        Py_XDECREF(elabel);
        Py_XDECREF(evalue);
        if (append(parts, row) < 0) {
            goto done;
        }
    }
    if (append(parts, PyUnicode_FromString("</table>")) < 0) {
        goto done;
    }
    if (pre != NULL) {
        Py_SETREF(text, cmpy_html_escape(pre));
        if (text == NULL ||
            append(parts, PyUnicode_FromFormat("<pre>%U</pre>", text)) < 0) {
            goto done;
        }
    }
    sep = PyUnicode_FromString("");
    if (sep != NULL) {
        out = PyUnicode_Join(sep, parts);
        Py_DECREF(sep);
    }
done:
    for (int i = 0; i < n; i++) {
        Py_XDECREF(values[i]);
    }
    Py_XDECREF(text);
    Py_XDECREF(parts);
    return out;
}

PyObject *
cmpy_html_size(unsigned long long nbytes)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double value = (double)nbytes;
    char buf[64];
    int u = 0;

    while (value >= 1024.0 && u < 4) {
        value /= 1024.0;
        u++;
    }
    /* PyUnicode_FromFormat has no %g. */
    snprintf(buf, sizeof(buf), "%.4g %s", value, units[u]);
    return PyUnicode_FromString(buf);
}
