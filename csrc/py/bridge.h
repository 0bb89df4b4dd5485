/* Shared by the files of the CPython bridge. */
#ifndef PS_BRIDGE_H
#define PS_BRIDGE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "../common.h"
#include "../loop.h"

typedef struct {
    PyTypeObject *request_type;
    PyTypeObject *input_type;
    PyTypeObject *errors_type;
    PyTypeObject *file_wrapper_type;
} ps_module_state_t;

/* Everything one serve() call needs, alive for its duration. */
typedef struct ps_wsgi ps_wsgi_t;

/* Adds the WSGI types to the module. Returns 0 or -1 with an exception. */
int ps_wsgi_init_types(PyObject *module, ps_module_state_t *st);
/* Builds the WSGI layer for one serve() call. Returns NULL with an exception. */
ps_wsgi_t *ps_wsgi_new(ps_module_state_t *st, PyObject *app, PyObject *config);
void ps_wsgi_free(ps_wsgi_t *ctx);
extern const ps_handler_t ps_wsgi_handler;

/* Logging through Python's logging module. */
/* Logs the pending exception with its traceback on `logger` and clears it. */
void ps_log_exception(PyObject *logger, const char *fmt, ...);
/* Logs a plain message at ERROR level; a pending exception stays pending. */
void ps_log_error(PyObject *logger, const char *fmt, ...);

#endif
