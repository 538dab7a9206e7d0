/* _mha.c — the Python binding's C half: libmha's engine, attention core and KV cache behind a
 * few functions on CPython's stable ABI (abi3, 3.11: the buffer protocol is in it), so one build
 * serves every later CPython and needs nothing beyond the C compiler the library takes. The
 * Python half (mha/__init__.py) shapes arrays and configs; this half checks every buffer against
 * the sizes it is called with before libmha reads or writes it, releases the GIL while the
 * engine runs, and serializes calls on one engine with its own lock (an engine's arena is one
 * caller's at a time), so several Python threads sharing an engine wait, never corrupt. */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "mha.h"
#include "mha_io.h"

static PyObject *MhaError; /* args: (message, status name) */

static PyObject *fail(mha_status st, const char *msg)
{
    PyObject *args = Py_BuildValue("(ss)", msg && msg[0] ? msg : mha_status_str(st), mha_status_str(st));
    if (args) {
        PyErr_SetObject(MhaError, args);
        Py_DECREF(args);
    }
    return NULL;
}

/* ---- the engine: a capsule holding it, its config and its lock ---- */

typedef struct engine {
    mha_engine *e;
    mha_config cfg;
    PyThread_type_lock lock;
} engine;

static void engine_free(PyObject *cap)
{
    engine *g = PyCapsule_GetPointer(cap, "mha.engine");
    if (!g)
        return;
    mha_free(g->e);
    if (g->lock)
        PyThread_free_lock(g->lock);
    PyMem_Free(g);
}

static engine *engine_of(PyObject *cap)
{
    return PyCapsule_GetPointer(cap, "mha.engine"); /* sets TypeError/ValueError when not one */
}

/* Runs while the engine is this thread's: the GIL released, the engine's lock held. */
#define ENGINE_CALL(g, st, call)                                                                                     \
    do {                                                                                                             \
        Py_BEGIN_ALLOW_THREADS PyThread_acquire_lock((g)->lock, WAIT_LOCK);                                          \
        st = (call);                                                                                                 \
        PyThread_release_lock((g)->lock);                                                                            \
        Py_END_ALLOW_THREADS                                                                                         \
    } while (0)

/* engine_new(text, origin, is_path): the config from YAML text (JSON is YAML too) or a file. */
static PyObject *engine_new(PyObject *self, PyObject *args)
{
    (void)self;
    const char *text, *origin;
    Py_ssize_t len;
    int is_path;
    if (!PyArg_ParseTuple(args, "s#sp", &text, &len, &origin, &is_path))
        return NULL;
    engine *g = PyMem_Calloc(1, sizeof *g);
    if (!g)
        return PyErr_NoMemory();
    char err[1024] = "";
    mha_status st = is_path ? mha_config_load(text, &g->cfg, err, sizeof err)
                            : mha_config_parse_with(text, (size_t)len, origin, &g->cfg, NULL, err, sizeof err);
    if (st == MHA_OK) {
        Py_BEGIN_ALLOW_THREADS st = mha_create_msg(&g->cfg, &g->e, err, sizeof err);
        Py_END_ALLOW_THREADS
    }
    if (st == MHA_OK && !(g->lock = PyThread_allocate_lock()))
        st = MHA_ERR_NOMEM, snprintf(err, sizeof err, "no lock for the engine");
    if (st != MHA_OK) {
        mha_free(g->e);
        PyMem_Free(g);
        return fail(st, err);
    }
    PyObject *cap = PyCapsule_New(g, "mha.engine", engine_free);
    if (!cap) {
        mha_free(g->e);
        PyThread_free_lock(g->lock);
        PyMem_Free(g);
    }
    return cap;
}

/* ---- buffers: each checked for its element type and count before libmha sees it ---- */

typedef struct view {
    Py_buffer b;
    int held;
} view;

static void views_release(view *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i].held)
            PyBuffer_Release(&v[i].b), v[i].held = 0;
}

/* obj (None allowed where optional) as a C-contiguous buffer of n elements of format fmt
 * ("f" float32, "i" int32, "B" uint8, "H" bfloat16 bits), writable when asked. */
static int view_get(PyObject *obj, const char *name, const char *fmt, Py_ssize_t n, int writable, int optional,
                    view *v)
{
    v->held = 0;
    if (obj == Py_None) {
        if (optional)
            return 0;
        PyErr_Format(PyExc_TypeError, "%s: an array is needed, not None", name);
        return -1;
    }
    if (PyObject_GetBuffer(obj, &v->b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    v->held = 1;
    const char *f = v->b.format ? v->b.format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@')
        f++;
    const Py_ssize_t size = fmt[0] == 'B' ? 1 : fmt[0] == 'H' ? 2 : 4;
    const int same = !strcmp(f, fmt) || (fmt[0] == 'i' && !strcmp(f, "l") && v->b.itemsize == 4) ||
                     (fmt[0] == 'B' && !strcmp(f, "?"));
    if (!same || v->b.itemsize != size) {
        PyErr_Format(PyExc_TypeError, "%s: elements of format '%s' (%zd bytes); %s are needed", name, f,
                     v->b.itemsize, fmt[0] == 'f' ? "float32" : fmt[0] == 'i' ? "int32" : fmt[0] == 'H' ? "bfloat16 bits (uint16)" : "uint8");
        return -1;
    }
    if (v->b.len != n * size) {
        PyErr_Format(PyExc_ValueError, "%s: %zd elements; %zd are needed", name, v->b.len / size, n);
        return -1;
    }
    return 0;
}

static void *ptr(const view *v)
{
    return v->held ? v->b.buf : NULL;
}

/* a·b·c as a Py_ssize_t, -1 past its range (every factor >= 0) */
static Py_ssize_t count3(long long a, long long b, long long c)
{
    if (a < 0 || b < 0 || c < 0)
        return -1;
    const long long lim = PY_SSIZE_T_MAX / 4;
    if (a && b > lim / a)
        return -1;
    if (a * b && c > lim / (a * b))
        return -1;
    return (Py_ssize_t)(a * b * c);
}

static int sizes_ok(Py_ssize_t n, const char *what)
{
    if (n >= 0)
        return 1;
    PyErr_Format(PyExc_ValueError, "%s: the sizes overflow or are negative", what);
    return 0;
}

/* set_weights(engine, layout_torch, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, sinks):
 * float32 arrays; the engine checks what it needs of them by its config, this call their sizes. */
static PyObject *engine_set_weights(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *o[11];
    int torch;
    if (!PyArg_ParseTuple(args, "OpOOOOOOOOOOO", &cap, &torch, &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                          &o[8], &o[9], &o[10]))
        return NULL;
    engine *g = engine_of(cap);
    if (!g)
        return NULL;
    const mha_config *c = &g->cfg;
    const long long dk = mha_config_head_dim(c), h = c->n_heads, kvh = c->n_kv_heads ? c->n_kv_heads : c->n_heads;
    const Py_ssize_t n[11] = {count3(c->d_model, h, dk), count3(c->d_model, kvh, dk), count3(c->d_model, kvh, dk),
                              count3(c->d_model, h, dk), count3(1, h, dk), count3(1, kvh, dk), count3(1, kvh, dk),
                              count3(1, 1, c->d_model), count3(1, 1, mha_config_qk_norm_len(c, 0)),
                              count3(1, 1, mha_config_qk_norm_len(c, 1)), count3(1, 1, h)};
    static const char *const names[11] = {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "q_norm", "k_norm", "sinks"};
    view v[11];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 11; i++)
        if (!sizes_ok(n[i], names[i]) || view_get(o[i], names[i], "f", n[i], 0, i >= 4, &v[i]) < 0) {
            views_release(v, 11);
            return NULL;
        }
    mha_weights w;
    memset(&w, 0, sizeof w);
    w.w_q = ptr(&v[0]), w.w_k = ptr(&v[1]), w.w_v = ptr(&v[2]), w.w_o = ptr(&v[3]);
    w.b_q = ptr(&v[4]), w.b_k = ptr(&v[5]), w.b_v = ptr(&v[6]), w.b_o = ptr(&v[7]);
    w.q_norm = ptr(&v[8]), w.k_norm = ptr(&v[9]), w.sinks = ptr(&v[10]);
    w.layout = torch ? MHA_LAYOUT_TORCH : MHA_LAYOUT_XW;
    mha_status st;
    ENGINE_CALL(g, st, mha_set_weights(g->e, &w));
    views_release(v, 11);
    if (st != MHA_OK)
        return fail(st, mha_engine_last_error(g->e));
    Py_RETURN_NONE;
}

/* forward(engine, q, k, v, out, batch, seq_q, seq_kv, causal, q_lengths, kv_lengths, mask):
 * q (batch, seq_q, d), k and v (batch, seq_kv, d), out (batch, seq_q, d). */
static PyObject *engine_forward(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *oq, *ok, *ov, *oout, *oql, *okl, *omask;
    int batch, seq_q, seq_kv, causal;
    if (!PyArg_ParseTuple(args, "OOOOOiiipOOO", &cap, &oq, &ok, &ov, &oout, &batch, &seq_q, &seq_kv, &causal, &oql, &okl,
                          &omask))
        return NULL;
    engine *g = engine_of(cap);
    if (!g)
        return NULL;
    const long long d = g->cfg.d_model;
    const Py_ssize_t nq = count3(batch, seq_q, d), nk = count3(batch, seq_kv, d), nb = count3(1, 1, batch),
                     nm = count3(1, seq_q, seq_kv);
    if (!sizes_ok(nq, "q") || !sizes_ok(nk, "k") || !sizes_ok(nm, "mask"))
        return NULL;
    view v[7];
    memset(v, 0, sizeof v);
    if (view_get(oq, "q", "f", nq, 0, 0, &v[0]) < 0 || view_get(ok, "k", "f", nk, 0, 0, &v[1]) < 0 ||
        view_get(ov, "v", "f", nk, 0, 0, &v[2]) < 0 || view_get(oout, "out", "f", nq, 1, 0, &v[3]) < 0 ||
        view_get(oql, "q_lengths", "i", nb, 0, 1, &v[4]) < 0 || view_get(okl, "kv_lengths", "i", nb, 0, 1, &v[5]) < 0 ||
        view_get(omask, "mask", "B", nm, 0, 1, &v[6]) < 0) {
        views_release(v, 7);
        return NULL;
    }
    const mha_input in = {.batch = batch, .seq_q = seq_q, .seq_kv = seq_kv, .q = ptr(&v[0]), .k = ptr(&v[1]),
                          .v = ptr(&v[2]), .q_lengths = ptr(&v[4]), .kv_lengths = ptr(&v[5]), .causal = causal,
                          .mask = ptr(&v[6])};
    mha_status st;
    ENGINE_CALL(g, st, mha_forward(g->e, &in, ptr(&v[3]), NULL));
    views_release(v, 7);
    if (st != MHA_OK)
        return fail(st, mha_engine_last_error(g->e));
    Py_RETURN_NONE;
}

/* A 4-dimensional tensor as the core reads it: its buffer (any strides, the last dimension's one
 * element) in (batch, heads, rows, features) order, axes (0, 1, 2) or, for HF's (batch, rows,
 * heads, features), (0, 2, 1). Its element type fmt, its dims checked against want[] where
 * want[i] >= 0 (the rest taken from it), its strides turned into elements. */
static int tensor_get(PyObject *obj, const char *name, const char *fmt, int hf, int writable, Py_ssize_t want[4],
                      Py_ssize_t stride[3], view *v)
{
    v->held = 0;
    if (PyObject_GetBuffer(obj, &v->b, PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    v->held = 1;
    const Py_ssize_t size = fmt[0] == 'H' ? 2 : 4;
    const char *f = v->b.format ? v->b.format : "B";
    f += f[0] == '<' || f[0] == '=' || f[0] == '@';
    if (strcmp(f, fmt) || v->b.itemsize != size) {
        PyErr_Format(PyExc_TypeError, "%s: elements of format '%s'; %s are needed", name, f,
                     size == 2 ? "bfloat16 bits (uint16)" : "float32");
        return -1;
    }
    if (v->b.ndim != 4) {
        PyErr_Format(PyExc_ValueError, "%s: %d dimensions; 4 are needed", name, v->b.ndim);
        return -1;
    }
    static const int order[2][3] = {{0, 1, 2}, {0, 2, 1}};
    const Py_ssize_t dims[4] = {v->b.shape[0], v->b.shape[order[hf][1]], v->b.shape[order[hf][2]], v->b.shape[3]};
    for (int i = 0; i < 4; i++) {
        if (want[i] >= 0 && dims[i] != want[i]) {
            PyErr_Format(PyExc_ValueError, "%s: dimension %s is %zd; %zd is needed", name,
                         (const char *const[]){"batch", "heads", "rows", "features"}[i], dims[i], want[i]);
            return -1;
        }
        want[i] = dims[i];
    }
    if (v->b.strides[3] != size) {
        PyErr_Format(PyExc_ValueError, "%s: its features must be contiguous (stride %zd bytes)", name, v->b.strides[3]);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        const Py_ssize_t st = v->b.strides[order[hf][i]];
        if (st < 0 || st % size) {
            PyErr_Format(PyExc_ValueError, "%s: stride %zd bytes; non-negative whole elements are needed", name, st);
            return -1;
        }
        stride[i] = st / size;
    }
    return 0;
}

/* core(engine, q, k, v, out, hf_layout, bf16, causal, q_lengths, kv_lengths, mask, sinks): q
 * (batch, heads, seq_q, head_dim), k and v (batch, kv_heads, seq_kv, head_dim / v_head_dim), out
 * (batch, heads, seq_q, v_head_dim), or each in HF's (batch, rows, heads, features) order: any
 * strides numpy or torch gives (the buffer protocol's), the features contiguous, read and written
 * in place. */
static PyObject *engine_core(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *o[4], *oql, *okl, *omask, *osinks;
    int hf, bf16, causal;
    if (!PyArg_ParseTuple(args, "OOOOOpppOOOO", &cap, &o[0], &o[1], &o[2], &o[3], &hf, &bf16, &causal, &oql, &okl,
                          &omask, &osinks))
        return NULL;
    engine *g = engine_of(cap);
    if (!g)
        return NULL;
    const mha_config *c = &g->cfg;
    const Py_ssize_t h = c->n_heads, kvh = c->n_kv_heads ? c->n_kv_heads : c->n_heads;
    const Py_ssize_t dk = mha_config_head_dim(c), dv = mha_config_v_head_dim(c);
    const char *fmt = bf16 ? "H" : "f";
    view v[8];
    memset(v, 0, sizeof v);
    Py_ssize_t s[4][3];
    Py_ssize_t wq[4] = {-1, h, -1, dk};
    int bad = tensor_get(o[0], "q", fmt, hf, 0, wq, s[0], &v[0]) < 0;
    Py_ssize_t wk[4] = {wq[0], kvh, -1, dk};
    bad = bad || tensor_get(o[1], "k", fmt, hf, 0, wk, s[1], &v[1]) < 0;
    Py_ssize_t wv[4] = {wq[0], kvh, wk[2], dv}, wo[4] = {wq[0], h, wq[2], dv};
    bad = bad || tensor_get(o[2], "v", fmt, hf, 0, wv, s[2], &v[2]) < 0 ||
          tensor_get(o[3], "out", fmt, hf, 1, wo, s[3], &v[3]) < 0;
    const Py_ssize_t batch = wq[0], seq_q = wq[2], seq_kv = wk[2];
    if (!bad && (batch > INT32_MAX || seq_q > INT32_MAX || seq_kv > INT32_MAX)) {
        PyErr_Format(PyExc_ValueError, "q, k: batch %zd, seq_q %zd, seq_kv %zd past int's range", batch, seq_q, seq_kv);
        bad = 1;
    }
    const Py_ssize_t nm = bad ? 0 : count3(1, seq_q, seq_kv);
    if (bad || !sizes_ok(nm, "mask") || view_get(oql, "q_lengths", "i", batch, 0, 1, &v[4]) < 0 ||
        view_get(okl, "kv_lengths", "i", batch, 0, 1, &v[5]) < 0 || view_get(omask, "mask", "B", nm, 0, 1, &v[6]) < 0 ||
        view_get(osinks, "sinks", "f", h, 0, 1, &v[7]) < 0) {
        views_release(v, 8);
        return NULL;
    }
    mha_core_input in = {.batch = (int)batch, .seq_q = (int)seq_q, .seq_kv = (int)seq_kv,
                         .dtype = bf16 ? MHA_DTYPE_BF16 : MHA_DTYPE_F32, .q = ptr(&v[0]), .k = ptr(&v[1]),
                         .v = ptr(&v[2]), .q_lengths = ptr(&v[4]), .kv_lengths = ptr(&v[5]), .causal = causal,
                         .mask = ptr(&v[6]), .sinks = ptr(&v[7])};
    ptrdiff_t out_stride[3];
    for (int i = 0; i < 3; i++)
        in.q_stride[i] = s[0][i], in.k_stride[i] = s[1][i], in.v_stride[i] = s[2][i], out_stride[i] = s[3][i];
    mha_status st;
    ENGINE_CALL(g, st, mha_core_forward(g->e, &in, ptr(&v[3]), out_stride));
    views_release(v, 8);
    if (st != MHA_OK)
        return fail(st, mha_engine_last_error(g->e));
    Py_RETURN_NONE;
}

/* ---- the KV cache ---- */

typedef struct cache {
    mha_kv_cache *c;
    PyObject *engine; /* the engine capsule it was made for, kept alive */
} cache;

static void cache_free(PyObject *cap)
{
    cache *k = PyCapsule_GetPointer(cap, "mha.cache");
    if (!k)
        return;
    mha_kv_cache_free(k->c);
    Py_XDECREF(k->engine);
    PyMem_Free(k);
}

/* cache_new(engine, n_blocks, block_size, max_seqs) */
static PyObject *cache_new(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    int n_blocks, block_size, max_seqs;
    if (!PyArg_ParseTuple(args, "Oiii", &cap, &n_blocks, &block_size, &max_seqs))
        return NULL;
    engine *g = engine_of(cap);
    if (!g)
        return NULL;
    cache *k = PyMem_Calloc(1, sizeof *k);
    if (!k)
        return PyErr_NoMemory();
    mha_status st;
    Py_BEGIN_ALLOW_THREADS st = mha_kv_cache_create(&g->cfg, n_blocks, block_size, max_seqs, &k->c);
    Py_END_ALLOW_THREADS
    if (st != MHA_OK) {
        PyMem_Free(k);
        return fail(st, "mha_kv_cache_create refused: n_blocks, block_size and max_seqs must be positive and the "
                        "cache's bytes within range");
    }
    PyObject *out = PyCapsule_New(k, "mha.cache", cache_free);
    if (!out) {
        mha_kv_cache_free(k->c);
        PyMem_Free(k);
        return NULL;
    }
    Py_INCREF(cap);
    k->engine = cap;
    return out;
}

/* step(engine, cache, n_past, n_new, blocks, max_blocks, x, out): int32 n_past, n_new (n_seqs),
 * blocks (n_seqs, max_blocks); x and out (Σ n_new, d). */
static PyObject *engine_step(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap, *ccap, *opast, *onew, *oblocks, *ox, *oout;
    int n_seqs, max_blocks;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "OOiOOOinOO", &cap, &ccap, &n_seqs, &opast, &onew, &oblocks, &max_blocks, &rows, &ox,
                          &oout))
        return NULL;
    engine *g = engine_of(cap);
    cache *k = g ? PyCapsule_GetPointer(ccap, "mha.cache") : NULL;
    if (!k)
        return NULL;
    const Py_ssize_t ns = count3(1, 1, n_seqs), nbl = count3(1, n_seqs, max_blocks), nx = count3(1, rows, g->cfg.d_model);
    if (!sizes_ok(ns, "n_past") || !sizes_ok(nbl, "blocks") || !sizes_ok(nx, "x"))
        return NULL;
    view v[5];
    memset(v, 0, sizeof v);
    if (view_get(opast, "n_past", "i", ns, 0, 0, &v[0]) < 0 || view_get(onew, "n_new", "i", ns, 0, 0, &v[1]) < 0 ||
        view_get(oblocks, "blocks", "i", nbl, 0, 0, &v[2]) < 0 || view_get(ox, "x", "f", nx, 0, 0, &v[3]) < 0 ||
        view_get(oout, "out", "f", nx, 1, 0, &v[4]) < 0) {
        views_release(v, 5);
        return NULL;
    }
    long long sum = 0;
    for (int i = 0; i < n_seqs; i++)
        sum += ((const int32_t *)v[1].b.buf)[i];
    if (sum != rows) {
        views_release(v, 5);
        PyErr_Format(PyExc_ValueError, "x: %zd rows, but the sequences bring %lld new tokens", rows, sum);
        return NULL;
    }
    const mha_step s = {.n_seqs = n_seqs, .n_past = ptr(&v[0]), .n_new = ptr(&v[1]), .blocks = ptr(&v[2]),
                        .max_blocks = max_blocks, .x = ptr(&v[3])};
    mha_status st;
    ENGINE_CALL(g, st, mha_step_forward(g->e, k->c, &s, ptr(&v[4])));
    views_release(v, 5);
    if (st != MHA_OK)
        return fail(st, mha_engine_last_error(g->e));
    Py_RETURN_NONE;
}

/* ---- what the engine and the machine are ---- */

/* engine_info(engine): {d_model, n_heads, n_kv_heads, head_dim, v_head_dim, max_batch,
 * max_seq_q, max_seq_kv, precision, isa, kernel, blis_arch, threads, workspace_bytes} */
static PyObject *engine_info(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *cap;
    if (!PyArg_ParseTuple(args, "O", &cap))
        return NULL;
    engine *g = engine_of(cap);
    if (!g)
        return NULL;
    const mha_config *c = &g->cfg;
    return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:s,s:s,s:s,s:i,s:n,s:O}", "d_model", c->d_model,
                         "n_heads", c->n_heads, "n_kv_heads", c->n_kv_heads ? c->n_kv_heads : c->n_heads, "head_dim",
                         mha_config_head_dim(c), "v_head_dim", mha_config_v_head_dim(c), "max_batch", c->max_batch,
                         "max_seq_q", c->max_seq_q, "max_seq_kv", c->max_seq_kv, "precision",
                         mha_precision_name(c->precision), "isa", mha_engine_isa(g->e), "kernel",
                         mha_engine_kernel(g->e), "blis_arch", mha_engine_blis_arch(g->e), "threads",
                         mha_engine_threads(g->e), "workspace_bytes", (Py_ssize_t)mha_engine_workspace_size(g->e),
                         "bias", c->bias ? Py_True : Py_False);
}

/* info(): the library and the machine, as mha info says them */
static PyObject *info(PyObject *self, PyObject *noargs)
{
    (void)self, (void)noargs;
    PyObject *tables = PyDict_New();
    if (!tables)
        return NULL;
    static const char *const names[] = {"avx512", "avx2", "ref"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char buf[1024];
        if (mha_isa_describe(names[i], buf, sizeof buf) != MHA_OK)
            continue;
        PyObject *s = PyUnicode_FromString(buf);
        if (!s || PyDict_SetItemString(tables, names[i], s) < 0) {
            Py_XDECREF(s);
            Py_DECREF(tables);
            return NULL;
        }
        Py_DECREF(s);
    }
    PyObject *out = Py_BuildValue("{s:s,s:i,s:s,s:s,s:s,s:s,s:n,s:O}", "version", mha_version_string(), "version_number",
                                  mha_version_number(), "isa", mha_isa_auto(), "bf16_kernel", mha_bf16_kernel_auto(),
                                  "blis_arch", mha_blis_arch_auto(), "blis_version", mha_blis_version(), "l2_bytes",
                                  (Py_ssize_t)mha_l2_bytes(), "tables", tables);
    Py_DECREF(tables);
    return out;
}

static PyMethodDef methods[] = {
    {"engine_new", engine_new, METH_VARARGS, "engine_new(text, origin, is_path) -> engine"},
    {"engine_set_weights", engine_set_weights, METH_VARARGS, "set_weights(engine, torch_layout, w_q ... sinks)"},
    {"engine_forward", engine_forward, METH_VARARGS, "forward(engine, q, k, v, out, batch, seq_q, seq_kv, ...)"},
    {"engine_core", engine_core, METH_VARARGS, "core(engine, q, k, v, out, hf_layout, bf16, causal, ...)"},
    {"engine_step", engine_step, METH_VARARGS, "step(engine, cache, n_seqs, n_past, n_new, blocks, ...)"},
    {"engine_info", engine_info, METH_VARARGS, "engine_info(engine) -> dict"},
    {"cache_new", cache_new, METH_VARARGS, "cache_new(engine, n_blocks, block_size, max_seqs) -> cache"},
    {"info", info, METH_NOARGS, "info() -> dict"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "mha._mha", "libmha's engine (mha/__init__.py wraps it)",
                                    -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__mha(void)
{
    if (mha_version_number() != MHA_VERSION_NUMBER) {
        PyErr_Format(PyExc_ImportError, "libmha %s is loaded; this binding was built against %d", mha_version_string(),
                     MHA_VERSION_NUMBER);
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    MhaError = PyErr_NewException("mha.MhaError", NULL, NULL);
    if (!MhaError || PyModule_AddObject(m, "MhaError", MhaError) < 0) {
        Py_XDECREF(MhaError);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(MhaError);
    return m;
}
