/* TLS in the bridge: what WSGI and ASGI show of a TLS connection (the ASGI
 * "tls" scope extension, the Apache/uWSGI environ variables HTTPS and
 * SSL_*), built only for requests that came over TLS so that plain ones pay
 * nothing; the session ticket keys a master's workers share; and the text of
 * the last certificate files that loaded. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "master/master.h"
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

/* ---- session ticket keys shared by a master's workers ---- */

/* The ring lives in an anonymous shared mapping the master makes before
 * its first fork. The master writes it under a sequence lock (seq is odd
 * while it writes); each worker copies it when seq changed and installs the
 * keys in its context, so a ticket one worker issued resumes on any other,
 * and a rotated-out key stops being accepted everywhere at once. */
typedef struct {
    volatile uint32_t seq;
    int n;
    ps_tls_ticket_key_t keys[PS_TLS_MAX_TICKET_KEYS];
} ticket_ring_t;

static ticket_ring_t *ring;  /* NULL: not under a master, or no TLS */
static double ring_rotation; /* seconds between new keys */
static double ring_next;     /* the master's next rotation (ps_master_now) */
/* The worker's side: its context, the seq it installed, the check timer. */
static ps_tls_ctx_t *ring_ctx;
static uint32_t ring_seen;
static ev_timer ring_timer;
static struct ev_loop *ring_loop;

int ps_py_tls_ring_create(double rotation)
{
    ticket_ring_t *r =
        mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    memset(r, 0, sizeof(*r));
    if (ps_tls_generate_ticket_key(&r->keys[0]) < 0) {
        munmap(r, sizeof(*r));
        PyErr_SetString(PyExc_OSError, "cannot generate a TLS session ticket key");
        return -1;
    }
    r->n = 1;
    r->seq = 2;
    ring = r;
    ring_rotation = rotation > 0 ? rotation : 3600;
    ring_next = ps_master_now() + ring_rotation;
    return 0;
}

void ps_py_tls_ring_rotate(void)
{
    if (ring == NULL || ps_master_now() < ring_next)
        return;
    ps_tls_ticket_key_t key;
    ring_next = ps_master_now() + ring_rotation;
    if (ps_tls_generate_ticket_key(&key) < 0)
        return; /* the current key stays; tried again next time */
    __atomic_store_n(&ring->seq, ring->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memmove(&ring->keys[1], &ring->keys[0], sizeof(key) * (PS_TLS_MAX_TICKET_KEYS - 1));
    ring->keys[0] = key;
    ring->n = PS_MIN(ring->n + 1, PS_TLS_MAX_TICKET_KEYS);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&ring->seq, ring->seq + 1, __ATOMIC_RELAXED);
    explicit_bzero(&key, sizeof(key));
}

/* Copies the ring when it changed and installs it in the worker's context. */
static void ring_install(void)
{
    if (ring == NULL || ring_ctx == NULL)
        return;
    ps_tls_ticket_key_t keys[PS_TLS_MAX_TICKET_KEYS];
    uint32_t seq;
    int n;
    for (;;) {
        seq = __atomic_load_n(&ring->seq, __ATOMIC_ACQUIRE);
        if (seq == ring_seen)
            return;
        if (seq & 1)
            continue; /* the master is writing: a few stores at most */
        n = ring->n;
        memcpy(keys, ring->keys, sizeof(keys));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&ring->seq, __ATOMIC_RELAXED) == seq)
            break;
    }
    if (ps_tls_set_ticket_keys(ring_ctx, keys, n) == 0)
        ring_seen = seq;
    explicit_bzero(keys, sizeof(keys));
}

/* A ticket under a key this worker has not read yet: the master wrote the
 * ring before any worker could issue one under it. */
static void ring_refresh(void *data)
{
    PS_UNUSED(data);
    ring_install();
}

static void on_ring_timer(struct ev_loop *loop, ev_timer *t, int revents)
{
    PS_UNUSED(loop);
    PS_UNUSED(t);
    PS_UNUSED(revents);
    ring_install();
}

void ps_py_tls_ring_attach(struct ev_loop *loop, ps_tls_ctx_t *ctx)
{
    if (ring == NULL || ctx == NULL)
        return;
    ring_ctx = ctx;
    ring_seen = 0;
    ring_install();
    ps_tls_set_key_refresh(ctx, ring_refresh, NULL);
    ring_loop = loop;
    ev_timer_init(&ring_timer, on_ring_timer, 1.0, 1.0);
    ev_timer_start(loop, &ring_timer);
    ev_unref(loop); /* the check alone does not keep the loop alive */
}

void ps_py_tls_ring_detach(void)
{
    if (ring_loop == NULL)
        return;
    ev_ref(ring_loop);
    ev_timer_stop(ring_loop, &ring_timer);
    ring_loop = NULL;
    ps_tls_set_key_refresh(ring_ctx, NULL, NULL);
    ring_ctx = NULL;
}

/* ---- the last certificate files that loaded ---- */

/* Filled by the master (or the single process) in the checks at start and
 * at each HUP, inherited by its workers at fork. */
static struct {
    int set;
    char *names[2 * PS_TLS_MAX_CERTS + 1]; /* certfile, keyfile per cert, then ca_certs */
    ps_tls_pem_t pem;
} good;

/* The file names of s in good.names' order (NULL where none). */
static void file_names(const ps_tls_settings_t *s, const char **names)
{
    for (int i = 0; i < PS_TLS_MAX_CERTS; i++) {
        names[2 * i] = i < s->ncerts ? s->certs[i].certfile : NULL;
        names[2 * i + 1] = i < s->ncerts ? s->certs[i].keyfile : NULL;
    }
    names[2 * PS_TLS_MAX_CERTS] = s->cert_reqs != PS_TLS_CERT_NONE ? s->ca_certs : NULL;
}

static int same_name(const char *a, const char *b)
{
    return a == NULL || b == NULL ? a == b : strcmp(a, b) == 0;
}

/* 1 when good holds the text of the files s names. */
static int good_matches(const ps_tls_settings_t *s)
{
    const char *names[PS_ARRAY_LEN(good.names)];
    if (!good.set)
        return 0;
    file_names(s, names);
    for (size_t i = 0; i < PS_ARRAY_LEN(names); i++)
        if (!same_name(names[i], good.names[i]))
            return 0;
    return 1;
}

static void good_clear(void)
{
    for (size_t i = 0; i < PS_ARRAY_LEN(good.names); i++) {
        free(good.names[i]);
        good.names[i] = NULL;
    }
    ps_tls_pem_free(&good.pem);
    good.set = 0;
}

/* Keeps pem (taken: the caller's copy is emptied) as the text of s's
 * files. Out of memory keeps nothing: workers then read the files. */
static void good_keep(const ps_tls_settings_t *s, ps_tls_pem_t *pem)
{
    const char *names[PS_ARRAY_LEN(good.names)];
    good_clear();
    file_names(s, names);
    for (size_t i = 0; i < PS_ARRAY_LEN(names); i++) {
        if (names[i] != NULL && (good.names[i] = strdup(names[i])) == NULL) {
            good_clear();
            ps_tls_pem_free(pem);
            return;
        }
    }
    good.pem = *pem;
    memset(pem, 0, sizeof(*pem));
    good.set = 1;
}

ps_tls_ctx_t *ps_py_tls_ctx_new(const ps_tls_settings_t *s, int fresh, char *err, size_t errlen)
{
    if (!fresh && good_matches(s))
        return ps_tls_ctx_new_pem(s, &good.pem, err, errlen);
    ps_tls_pem_t pem;
    memset(&pem, 0, sizeof(pem));
    if (ps_tls_pem_read(&pem, s, err, errlen) < 0)
        return NULL;
    ps_tls_ctx_t *ctx = ps_tls_ctx_new_pem(s, &pem, err, errlen);
    if (ctx != NULL)
        good_keep(s, &pem);
    ps_tls_pem_free(&pem);
    return ctx;
}
