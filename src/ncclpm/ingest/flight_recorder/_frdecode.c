/* One flight-recorder pickle -> the analysis columns of fr_decode, without a Python object per value.
 *
 * decode(data, keep_frames) walks the pickle opcodes into a small tree of C nodes (strings point into `data`),
 * then writes each entry's analysis fields into fixed-width buffers: Int64 values, Booleans, UInt32 codes into
 * the dump's distinct strings, and UInt32 codes into its distinct nested values keyed by their Python repr (the
 * key fr_values._Interner uses).  It returns a str (why this dump is left to the Python path) for anything it
 * does not read exactly as pickle.Unpickler + fr_decode would: other opcodes, protocol-0/1 forms, big ints,
 * sets, bytes, a structure or type the dump layout does not have.  Every read is bounded by the data, nesting
 * by MAX_DEPTH, memo indices by the scan's slack; the caller runs the opcode scan (_frscan) first as well.
 * Optional: built by hatch_build.py when a C compiler is present (with _frdecode_tree.h and _frdecode_keys.h). */
#include "_frdecode_tree.h"
#include "_frdecode_keys.h"
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* ---- entries -> columns ---------------------------------------------------------------------------------- */

enum { F_RECORD_ID, F_PG_ID, F_SEQ, F_TIME, F_IS_P2P, F_RETIRED, F_PROFILING, F_STATE, F_PG, F_SIZES, F_DTYPES,
       F_FRAMES, NF };
static const char *FIELD[NF] = {"record_id", "pg_id", "collective_seq_id", "time_created_ns", "is_p2p", "retired",
                                "profiling_name", "state", "process_group", "input_sizes", "input_dtypes", "frames"};
#define N_INT 4
#define N_BOOL 2
#define N_STRCOL 4 /* profiling_name, state, pg_name, pg_desc */
#define N_NEST 3
#define NONE_CODE UINT32_MAX

static int field_of(Dec *x, int64_t key) { /* cached on the node: pickle memoizes the keys, entries share them */
    Node *s = &x->nodes[key];
    if (s->field != -3) return s->field;
    s->field = -1;
    if (s->t != T_STR) s->field = -2; /* the Python path reads such keys too; leave them to it */
    for (int f = 0; f < NF && s->field == -1; f++) if (str_is(x, key, FIELD[f])) s->field = (int8_t)f;
    return s->field;
}

/* slots[f] = the entry's value node for field f, or -1 */
static int entry_fields(Dec *x, int64_t e, int64_t *slots) {
    Iter it;
    int64_t key, val;
    for (int f = 0; f < NF; f++) slots[f] = -1;
    iter(x, e, &it);
    while ((key = next_kid(x, &it)) >= 0) {
        if ((val = next_kid(x, &it)) < 0) return no(x, "odd dict");
        int f = field_of(x, key);
        if (f == -2) return no(x, "an entry key that is not a string");
        if (f >= 0) slots[f] = val;
    }
    return 0;
}

typedef struct {
    int64_t n;
    int64_t *ints;      /* N_INT x n */
    uint8_t *bools;     /* N_BOOL x n */
    uint8_t *valid;     /* (N_INT + N_BOOL) x n */
    uint32_t *scodes;   /* N_STRCOL x n */
    uint32_t *ncodes;   /* N_NEST x n */
    Dict strings, nested[N_NEST];
    Buf key;
    int64_t newest_t, newest_r;
} Cols;

static void cols_free(Cols *c) {
    PyMem_RawFree(c->ints); PyMem_RawFree(c->bools); PyMem_RawFree(c->valid); PyMem_RawFree(c->scodes);
    PyMem_RawFree(c->ncodes); PyMem_RawFree(c->key.b);
    dict_free(&c->strings);
    for (int k = 0; k < N_NEST; k++) dict_free(&c->nested[k]);
}

static int str_code(Dec *x, Cols *c, int64_t v, uint32_t *out) {
    if (v < 0 || x->nodes[v].t == T_NONE) { *out = NONE_CODE; return 0; }
    Node *s = &x->nodes[v];
    if (s->t != T_STR) return no(x, "a text field of another type");
    int64_t code = dict_code(&c->strings, (const char *)x->d + s->v, s->w, v);
    if (code < 0) return no(x, "out of memory");
    *out = (uint32_t)code;
    return 0;
}

static int columns(Dec *x, int64_t entries, int64_t keep_frames, Cols *c) {
    int64_t n = x->nodes[entries].w, slots[NF], ends[2][NF];
    int present[NF];
    Iter it;
    c->n = n;
    if (n == 0) return no(x, "no entries");
    c->ints = PyMem_RawMalloc((size_t)n * N_INT * sizeof(int64_t));
    c->bools = PyMem_RawMalloc((size_t)n * N_BOOL);
    c->valid = PyMem_RawMalloc((size_t)n * (N_INT + N_BOOL));
    c->scodes = PyMem_RawMalloc((size_t)n * N_STRCOL * sizeof(uint32_t));
    c->ncodes = PyMem_RawMalloc((size_t)n * N_NEST * sizeof(uint32_t));
    if (!c->ints || !c->bools || !c->valid || !c->scodes || !c->ncodes) return no(x, "out of memory");
    /* a column is read when the first or the last entry has its key (fr_decode._columns) */
    int64_t first = -1, last = -1, e;
    iter(x, entries, &it);
    while ((e = next_kid(x, &it)) >= 0) { if (first < 0) first = e; last = e; }
    for (int k = 0; k < 2; k++) {
        int64_t which = k ? last : first;
        if (x->nodes[which].t != T_DICT) return no(x, "an entry that is not a dict");
        if (entry_fields(x, which, ends[k]) < 0) return -1;
    }
    for (int f = 0; f < NF; f++) present[f] = ends[0][f] >= 0 || ends[1][f] >= 0;
    int64_t cut = keep_frames < 0 || n <= keep_frames ? 0 : n - keep_frames;
    c->newest_t = c->newest_r = -1;
    iter(x, entries, &it);
    for (int64_t i = 0; i < n; i++) {
        if ((e = next_kid(x, &it)) < 0) return no(x, "entry count");
        if (x->nodes[e].t != T_DICT) return no(x, "an entry that is not a dict");
        if (entry_fields(x, e, slots) < 0) return -1;
        for (int f = 0; f < NF; f++) if (!present[f]) slots[f] = -1;
        for (int f = 0; f < N_INT; f++) { /* Int64 columns */
            int64_t v = slots[f];
            uint8_t t = v < 0 ? T_NONE : x->nodes[v].t;
            if (t != T_NONE && t != T_INT) return no(x, "an integer field of another type");
            c->valid[f * n + i] = t == T_INT;
            c->ints[f * n + i] = t == T_INT ? x->nodes[v].v : 0;
        }
        for (int f = 0; f < N_BOOL; f++) {
            int64_t v = slots[F_IS_P2P + f];
            uint8_t t = v < 0 ? T_NONE : x->nodes[v].t;
            if (t != T_NONE && t != T_TRUE && t != T_FALSE) return no(x, "a boolean field of another type");
            c->valid[(N_INT + f) * n + i] = t != T_NONE;
            c->bools[f * n + i] = t == T_TRUE;
        }
        if (str_code(x, c, slots[F_PROFILING], &c->scodes[i]) < 0) return -1;
        if (str_code(x, c, slots[F_STATE], &c->scodes[n + i]) < 0) return -1;
        int64_t pg = slots[F_PG], name = -1, desc = -1;
        if (pg >= 0 && x->nodes[pg].t != T_NONE) { /* (name, desc, ...): a non-text part becomes None */
            Node *p = &x->nodes[pg];
            if (p->t != T_LIST && p->t != T_TUPLE) return no(x, "a process_group of another type");
            Iter pt;
            iter(x, pg, &pt);
            name = next_kid(x, &pt);
            desc = next_kid(x, &pt);
            if (name >= 0 && x->nodes[name].t != T_STR) name = -1;
            if (desc >= 0 && x->nodes[desc].t != T_STR) desc = -1;
        }
        if (str_code(x, c, name, &c->scodes[2 * n + i]) < 0 || str_code(x, c, desc, &c->scodes[3 * n + i]) < 0)
            return -1;
        /* stacks: kept for the newest keep_frames entries and for every entry not retired/completed */
        int64_t fr = slots[F_FRAMES];
        if (fr >= 0 && (keep_frames == 0 || i < cut)) {
            int64_t rv = slots[F_RETIRED], sv = slots[F_STATE];
            int done = (rv >= 0 && x->nodes[rv].t == T_TRUE) || (sv >= 0 && str_is(x, sv, "completed"));
            if (keep_frames == 0 || done) fr = -1;
        }
        int64_t nested[N_NEST] = {slots[F_SIZES], slots[F_DTYPES], fr};
        for (int k = 0; k < N_NEST; k++) {
            int64_t v = nested[k];
            if (v < 0 || x->nodes[v].t == T_NONE) { c->ncodes[k * n + i] = NONE_CODE; continue; }
            c->key.n = 0;
            if (repr_nested(x, &c->key, v, k) < 0) return no(x, "a nested value of an unusual shape");
            int64_t code = dict_code(&c->nested[k], c->key.b, c->key.n, v);
            if (code < 0) return no(x, "out of memory");
            c->ncodes[k * n + i] = (uint32_t)code;
        }
        if (i >= n - 64) { /* fr_decode._newest: the latest (time_created_ns, record_id) of the last 64 */
            int64_t t = c->valid[F_TIME * n + i] ? c->ints[F_TIME * n + i] : -1;
            int64_t r = c->valid[F_RECORD_ID * n + i] ? c->ints[F_RECORD_ID * n + i] : -1;
            if (t > c->newest_t || (t == c->newest_t && r > c->newest_r)) { c->newest_t = t; c->newest_r = r; }
        }
    }
    return 0;
}

/* ---- to Python -------------------------------------------------------------------------------------------- */

static const char *META[] = {"version", "comm_lib_version", "nccl_version", "pg_config", "pg_status"};

/* the top-level dict's metadata values (last wins, like a dict) and its entries list */
static PyObject *top_level(Dec *x, int64_t root, int64_t *entries) {
    int64_t pick[5] = {-1, -1, -1, -1, -1}, key, val;
    Iter it;
    *entries = -1;
    if (x->nodes[root].t != T_DICT) { x->why = "the top level is not a dict"; return NULL; }
    iter(x, root, &it);
    while ((key = next_kid(x, &it)) >= 0) {
        if ((val = next_kid(x, &it)) < 0) { x->why = "odd dict"; return NULL; }
        if (str_is(x, key, "entries")) *entries = val;
        for (int j = 0; j < 5; j++) if (str_is(x, key, META[j])) pick[j] = val;
    }
    if (*entries < 0 || x->nodes[*entries].t != T_LIST) { x->why = "no entries list"; return NULL; }
    PyObject *meta = PyDict_New();
    for (int j = 0; meta && j < 5; j++) {
        if (pick[j] < 0) continue;
        PyObject *v = to_py(x, pick[j], 1);
        if (!v || PyDict_SetItemString(meta, META[j], v) < 0) Py_CLEAR(meta);
        Py_XDECREF(v);
    }
    return meta;
}

static PyObject *bytes_of(const void *p, int64_t n) { return PyBytes_FromStringAndSize((const char *)p, n); }

/* (distinct values as Python objects) of one dictionary: strings decoded strictly, nested values converted */
static PyObject *values_of(Dec *x, Dict *t, int strings) {
    PyObject *out = PyList_New(t->count);
    for (int64_t i = 0; out && i < t->count; i++) {
        PyObject *v = strings ? PyUnicode_DecodeUTF8(t->arena + t->off[i], t->len[i], NULL)
                              : to_py(x, t->node[i], 1);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *keys_of(Dict *t) {
    PyObject *out = PyList_New(t->count);
    for (int64_t i = 0; out && i < t->count; i++) {
        PyObject *v = PyUnicode_DecodeASCII(t->arena + t->off[i], t->len[i], NULL);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, v);
    }
    return out;
}

static PyObject *result(Dec *x, Cols *c, PyObject *meta) {
    int64_t n = c->n;
    /* None -> the dictionary's size (the caller appends a null there) */
    for (int64_t i = 0; i < N_STRCOL * n; i++) if (c->scodes[i] == NONE_CODE) c->scodes[i] = (uint32_t)c->strings.count;
    for (int k = 0; k < N_NEST; k++)
        for (int64_t i = 0; i < n; i++)
            if (c->ncodes[k * n + i] == NONE_CODE) c->ncodes[k * n + i] = (uint32_t)c->nested[k].count;
    int all_valid = memchr(c->valid, 0, (size_t)(n * (N_INT + N_BOOL))) == NULL;
    PyObject *strings = values_of(x, &c->strings, 1);
    if (!strings) {
        Py_DECREF(meta);
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); x->why = "a surrogate in a text field"; }
        return NULL;
    }
    PyObject *nested = PyTuple_New(N_NEST);
    for (int k = 0; nested && k < N_NEST; k++) {
        PyObject *keys = keys_of(&c->nested[k]), *vals = keys ? values_of(x, &c->nested[k], 0) : NULL;
        PyObject *codes = vals ? bytes_of(c->ncodes + k * n, n * (int64_t)sizeof(uint32_t)) : NULL;
        if (!codes) { Py_XDECREF(keys); Py_XDECREF(vals); Py_CLEAR(nested); break; }
        PyObject *item = Py_BuildValue("(NNN)", keys, vals, codes);
        if (!item) { Py_CLEAR(nested); break; }
        PyTuple_SET_ITEM(nested, k, item);
    }
    if (!nested) { Py_DECREF(strings); Py_DECREF(meta); return NULL; }
    PyObject *valid = all_valid ? (Py_INCREF(Py_None), Py_None) : bytes_of(c->valid, n * (N_INT + N_BOOL));
    return Py_BuildValue("(nLLNNNNNNN)", (Py_ssize_t)n, (long long)c->newest_t, (long long)c->newest_r, meta,
                         bytes_of(c->ints, n * N_INT * (int64_t)sizeof(int64_t)), bytes_of(c->bools, n * N_BOOL),
                         valid, strings, bytes_of(c->scodes, n * N_STRCOL * (int64_t)sizeof(uint32_t)), nested);
}

/* the machine's arrays are kept between calls (the caller decodes dumps one after another, holding the GIL):
 * fresh pages and regrowth for every dump cost more than the decoding; release() frees them */
static Dec scratch;

static void keep_scratch(Dec *x) {
    scratch.nodes = x->nodes; scratch.capnode = x->capnode; scratch.segs = x->segs; scratch.capseg = x->capseg;
    scratch.pool = x->pool; scratch.cappool = x->cappool; scratch.stack = x->stack; scratch.capstack = x->capstack;
    scratch.marks = x->marks; scratch.capmarks = x->capmarks; scratch.memo = x->memo; scratch.capmemo = x->capmemo;
}

static PyObject *release(PyObject *self, PyObject *unused) {
    PyMem_RawFree(scratch.nodes); PyMem_RawFree(scratch.segs); PyMem_RawFree(scratch.pool);
    PyMem_RawFree(scratch.stack); PyMem_RawFree(scratch.marks); PyMem_RawFree(scratch.memo);
    memset(&scratch, 0, sizeof scratch);
#ifdef __GLIBC__
    /* the dumps' bytes (~0.5 MB each) came from the heap once glibc's mmap threshold had risen past their size; the
     * holes they leave stay in the process (~5 MB at 256 dumps) unless handed back here, after the last dump */
    malloc_trim(0);
#endif
    Py_RETURN_NONE;
}

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer buf;
    long long keep_frames;
    if (!PyArg_ParseTuple(args, "y*L", &buf, &keep_frames)) return NULL;
    Dec x;
    Cols c;
    x = scratch; /* the arrays only; the counts start at 0 */
    memset(&scratch, 0, sizeof scratch);
    x.nnode = x.nseg = x.npool = x.sp = x.nmarks = x.nmemo = 0;
    x.visits = 0; x.why = NULL;
    if (x.memo) memset(x.memo, 0, (size_t)x.capmemo * sizeof(int64_t));
    memset(&c, 0, sizeof c);
    x.d = (const unsigned char *)buf.buf;
    x.n = buf.len;
    PyObject *meta = NULL, *out = NULL;
    int64_t root, entries = -1;
    x.limit = 32 * (int64_t)buf.len + (1 << 20); /* as fr_scan.budget_for */
    root = run(&x);
    if (root >= 0 && (meta = top_level(&x, root, &entries)) != NULL && columns(&x, entries, keep_frames, &c) == 0
        && !x.why)
        out = result(&x, &c, meta); /* steals meta */
    else
        Py_XDECREF(meta);
    if (out && x.why) Py_CLEAR(out); /* something was cut short by the budget */
    PyBuffer_Release(&buf);
    cols_free(&c);
    keep_scratch(&x);
    if (out) return out;
    if (PyErr_Occurred()) {
        PyErr_Clear(); /* the Python path says what is wrong with this dump */
        if (!x.why) x.why = "a value Python refuses";
    }
    return PyUnicode_FromString(x.why ? x.why : "not read");
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, keep_frames) -> (n, newest_t, newest_r, meta, ints, bools, valid, strings, codes, nested) "
     "or a str: why the dump is left to the Python path"},
    {"release", release, METH_NOARGS, "release() frees the arrays kept between decode() calls (and the heap's free pages)"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frdecode", NULL, -1, methods};
PyMODINIT_FUNC PyInit__frdecode(void) { return PyModule_Create(&module); }
