/* Error logging from C into Python's logging (pyserver.error). */
#include <stdarg.h>
#include <stdio.h>

#include "bridge.h"

static void log_with(PyObject *logger, PyObject *exc, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    PyObject *meth = NULL, *text = NULL, *args = NULL, *kwargs = NULL, *res = NULL;
    meth = PyObject_GetAttrString(logger, "error");
    if (meth == NULL)
        goto error;
    text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace");
    if (text == NULL)
        goto error;
    args = PyTuple_Pack(1, text);
    if (args == NULL)
        goto error;
    if (exc != NULL) {
        kwargs = Py_BuildValue("{s:O}", "exc_info", exc);
        if (kwargs == NULL)
            goto error;
    }
    res = PyObject_Call(meth, args, kwargs);
    if (res == NULL)
        goto error;
    goto done;
error:
    /* Logging itself failed: say so on stderr rather than lose both. */
    PyErr_Clear();
    fprintf(stderr, "pyserver: %s\n", msg);
done:
    Py_XDECREF(meth);
    Py_XDECREF(text);
    Py_XDECREF(args);
    Py_XDECREF(kwargs);
    Py_XDECREF(res);
}

void ps_log_exception(PyObject *logger, const char *fmt, ...)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && tb != NULL)
        PyException_SetTraceback(value, tb);
    va_list ap;
    va_start(ap, fmt);
    log_with(logger, value, fmt, ap);
    va_end(ap);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

void ps_log_error(PyObject *logger, const char *fmt, ...)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb); /* keep a pending exception aside */
    va_list ap;
    va_start(ap, fmt);
    log_with(logger, NULL, fmt, ap);
    va_end(ap);
    PyErr_Restore(type, value, tb);
}
