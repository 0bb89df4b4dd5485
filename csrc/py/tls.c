/* What WSGI and ASGI show of a TLS connection: the ASGI "tls" scope
 * extension and the Apache/uWSGI environ variables (HTTPS, SSL_*). Built
 * only for requests that came over TLS; plain requests pay nothing. */
#include <errno.h>

#include "bridge.h"

/* A str of the slice (NULL base: None). New reference or NULL. */
static PyObject *str_or_none(const char *p, size_t n)
{
    if (p == NULL)
        return Py_NewRef(Py_None);
    return PyUnicode_DecodeUTF8(p, (Py_ssize_t)n, "replace");
}

/* The client's subject as RFC 4514 text, or None without a certificate.
 * New reference or NULL with an exception. */
static PyObject *client_subject(const ps_transport_t *t)
{
    ps_buf_t b = {0};
    int rc = ps_tls_client_subject(t, &b);
    PyObject *res = NULL;
    if (rc == -ENOENT)
        res = Py_NewRef(Py_None);
    else if (rc < 0)
        PyErr_NoMemory();
    else
        res = str_or_none(ps_buf_head(&b) ? ps_buf_head(&b) : "", ps_buf_size(&b));
    ps_buf_free(&b);
    return res;
}

/* Certificate i of the client's chain as PEM text. New reference or NULL. */
static PyObject *client_cert(const ps_transport_t *t, int i)
{
    ps_buf_t b = {0};
    PyObject *res = NULL;
    if (ps_tls_client_cert_pem(t, i, &b) < 0)
        PyErr_NoMemory();
    else
        res = str_or_none(ps_buf_head(&b), ps_buf_size(&b));
    ps_buf_free(&b);
    return res;
}

PyObject *ps_py_tls_extension(const ps_transport_t *t)
{
    int version, cipher;
    ps_tls_version(t, &version);
    ps_tls_cipher(t, &cipher);
    ps_slice_t server = ps_tls_server_cert_pem(t);
    const char *verify = ps_tls_client_verify_error(t);
    int n = ps_tls_client_cert_count(t);
    PyObject *chain = PyList_New(n);
    PyObject *ext = NULL;
    for (int i = 0; chain != NULL && i < n; i++) {
        PyObject *pem = client_cert(t, i);
        if (pem == NULL)
            Py_CLEAR(chain);
        else
            PyList_SET_ITEM(chain, i, pem);
    }
    if (chain == NULL)
        return NULL;
    ext = Py_BuildValue("{s:N,s:N,s:N,s:N,s:N,s:N}", "server_cert",
                        str_or_none(server.base, server.len), "client_cert_chain", chain,
                        "client_cert_name", client_subject(t), "client_cert_error",
                        str_or_none(verify, verify ? strlen(verify) : 0), "tls_version",
                        version ? PyLong_FromLong(version) : Py_NewRef(Py_None), "cipher_suite",
                        cipher ? PyLong_FromLong(cipher & 0xffff) : Py_NewRef(Py_None));
    return ext;
}

/* env[key] = str(value), value a C string (skipped when NULL). */
static int set_text(PyObject *env, const char *key, const char *value)
{
    if (value == NULL)
        return 0;
    PyObject *v = PyUnicode_DecodeUTF8(value, (Py_ssize_t)strlen(value), "replace");
    if (v == NULL)
        return -1;
    int rc = PyDict_SetItemString(env, key, v);
    Py_DECREF(v);
    return rc;
}

/* env[key] = a new reference (steals it; None: nothing set). */
static int set_new(PyObject *env, const char *key, PyObject *value)
{
    if (value == NULL)
        return -1;
    int rc = value == Py_None ? 0 : PyDict_SetItemString(env, key, value);
    Py_DECREF(value);
    return rc;
}

int ps_py_tls_environ(PyObject *env, const ps_transport_t *t)
{
    if (set_text(env, "HTTPS", "on") < 0 ||
        set_text(env, "SSL_PROTOCOL", ps_tls_version(t, NULL)) < 0 ||
        set_text(env, "SSL_CIPHER", ps_tls_cipher(t, NULL)) < 0)
        return -1;
    if (ps_tls_client_cert_count(t) == 0)
        return 0;
    const char *verify = ps_tls_client_verify_error(t);
    if (set_new(env, "SSL_CLIENT_CERT", client_cert(t, 0)) < 0 ||
        set_new(env, "SSL_CLIENT_S_DN", client_subject(t)) < 0 ||
        set_text(env, "SSL_CLIENT_VERIFY", verify ? "FAILED" : "SUCCESS") < 0)
        return -1;
    return 0;
}
