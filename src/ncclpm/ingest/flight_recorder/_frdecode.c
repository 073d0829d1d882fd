/* Flight-recorder pickles -> the analysis columns of a whole load, without a Python object per value.
 *
 * A Job holds the load: its dictionaries of distinct strings and of distinct nested values (keyed by their Python
 * repr, the key fr_values._Interner uses) and the rows decoded since the last take().  Job.decode(data) reads one
 * dump without the GIL (so several threads decode dumps at once): the pickle machine runs on C nodes with the
 * opcode scan's bounds in the same pass (strings point into `data`), then each entry's analysis fields go into
 * fixed-width buffers: Int64 values, Booleans, UInt32 codes into the dump's distinct strings and nested values.
 * With the GIL again it makes the metadata and the nested values the load has not seen yet into Python objects,
 * and returns a Dumped holding the rest.  Job.add(dumped, rank, uid), called in dump order, merges its
 * dictionaries into the load's and appends its rows; Job.take() hands the rows and the new distinct values over.
 *
 * decode returns a str (why this dump is left to the Python path) for anything it does not read exactly as the
 * scan + pickle.Unpickler + fr_decode would: other opcodes, protocol-0/1 forms, big ints, sets, bytes, a structure
 * or type the dump layout does not have, what the scan refuses.  Every read is bounded by the data, nesting by
 * SCAN_DEPTH, memo indices by MEMO_SLACK, expansion by the scan's budget and the kids visited by `limit`.
 * Optional: built by hatch_build.py when a C compiler is present (with _frdecode_tree.h and _frdecode_keys.h). */
#include "_frdecode_tree.h"
#include "_frdecode_keys.h"
#include <stdatomic.h>
#include <time.h>
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
#define N_VALID (N_INT + N_BOOL)
#define N_STRCOL 4 /* profiling_name, state, pg_name, pg_desc */
#define N_NEST 3
#define NONE_CODE UINT32_MAX

static int field_lookup(Dec *x, int64_t key) { /* the first time a key node is met */
    Node *s = &x->nodes[key];
    s->field = -1;
    if (s->t != T_STR) s->field = -2; /* the Python path reads such keys too; leave them to it */
    for (int f = 0; f < NF && s->field == -1; f++) if (str_is(x, key, FIELD[f])) s->field = (int8_t)f;
    return s->field;
}

HOT int field_of(Dec *x, int64_t key) { /* cached on the node: pickle memoizes the keys, entries share them */
    Node *s = &x->nodes[key];
    if (LIKELY(s->field != -3)) return s->field;
    return field_lookup(x, key);
}

/* slots[f] = the entry's value node for field f, or -1 */
static int entry_fields(Dec *x, int64_t e, int64_t *slots) {
    for (int f = 0; f < NF; f++) slots[f] = -1;
    /* a dict's segments each hold whole (key, value) pairs (`dict_items`): walked a segment at a time, the visits
     * counted per segment against the same limit as `next_kid` */
    for (int64_t sg = x->nodes[e].first; sg >= 0; sg = x->segs[sg].next) {
        const Seg *seg = &x->segs[sg];
        if (UNLIKELY((x->visits += seg->len) > x->limit)) return no(x, "expands too much (a reference bomb?)");
        const Id *kv = x->pool + seg->start;
        for (int32_t i = 0; i + 1 < seg->len; i += 2) {
            int f = field_of(x, kv[i]);
            if (f == -2) return no(x, "an entry key that is not a string");
            if (f >= 0) slots[f] = kv[i + 1];
        }
    }
    return 0;
}

typedef struct { /* one dump's columns, codes into its own dictionaries */
    int64_t n;
    int64_t *ints;      /* N_INT x n */
    uint8_t *bools;     /* N_BOOL x n */
    uint8_t *valid;     /* N_VALID x n */
    uint32_t *scodes;   /* N_STRCOL x n */
    uint32_t *ncodes;   /* N_NEST x n */
    Dict strings, nested[N_NEST];
    Buf key;
    NCache seen[N_NEST]; /* by structure: sizes and dtypes (`shape_hash`) */
    int64_t newest_t, newest_r;
} Cols;

static void cols_free(Cols *c) {
    PyMem_RawFree(c->ints); PyMem_RawFree(c->bools); PyMem_RawFree(c->valid); PyMem_RawFree(c->scodes);
    PyMem_RawFree(c->ncodes); PyMem_RawFree(c->key.b);
    dict_free(&c->strings);
    for (int k = 0; k < N_NEST; k++) { dict_free(&c->nested[k]); ncache_free(&c->seen[k]); }
    memset(c, 0, sizeof *c);
}

/* a lone surrogate (ED A0..BF ..): pickle reads it ('surrogatepass'), but polars' strings cannot hold it */
static int has_surrogate(const unsigned char *p, int64_t n) {
    for (int64_t i = 0; i + 1 < n; i++) if (p[i] == 0xED && p[i + 1] >= 0xA0) return 1;
    return 0;
}

static int str_code(Dec *x, Cols *c, int64_t v, uint32_t *out) {
    if (v < 0 || x->nodes[v].t == T_NONE) { *out = NONE_CODE; return 0; }
    Node *s = &x->nodes[v];
    if (s->t != T_STR) return no(x, "a text field of another type");
    if (s->code >= 0) { *out = (uint32_t)s->code; return 0; } /* a memoized string seen before */
    const unsigned char *p = x->d + s->off;
    if (!s->ascii && has_surrogate(p, s->w)) return no(x, "a surrogate in a text field");
    int64_t code = dict_code(&c->strings, (const char *)p, s->w, v);
    if (code < 0) return no(x, "out of memory");
    s->code = (int32_t)code;
    *out = (uint32_t)code;
    return 0;
}

static int columns(Dec *x, int64_t entries, int64_t keep_frames, Cols *c) {
    int64_t n = x->nodes[entries].w, slots[NF], ends[2][NF];
    int present[NF];
    Iter it;
    c->n = n;
    if (n == 0) return no(x, "no entries");
    if (n > UINT32_MAX / 2) return no(x, "too many entries");
    c->ints = PyMem_RawMalloc((size_t)n * N_INT * sizeof(int64_t));
    c->bools = PyMem_RawMalloc((size_t)n * N_BOOL);
    c->valid = PyMem_RawMalloc((size_t)n * N_VALID);
    c->scodes = PyMem_RawMalloc((size_t)n * N_STRCOL * sizeof(uint32_t));
    c->ncodes = PyMem_RawMalloc((size_t)n * N_NEST * sizeof(uint32_t));
    if (!c->ints || !c->bools || !c->valid || !c->scodes || !c->ncodes) return no(x, "out of memory");
    /* a column is read when the first or the last entry has its key (fr_decode._columns) */
    int64_t first = -1, last = -1, e;
    iter(x, entries, &it);
    while ((e = next_kid(x, &it)) >= 0) { if (first < 0) first = e; last = e; }
    if (x->why) return -1;
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
            uint64_t h = 0;
            int hashed = k != K_FRAMES && shape_hash(x, v, k, &h) == 0; /* (stacks: only the kept ones are read) */
            int64_t code = hashed ? ncache_find(x, &c->seen[k], h, v, k) : -1;
            if (code < 0) {
                c->key.n = 0;
                if (repr_nested(x, &c->key, v, k) < 0) return no(x, "a nested value of an unusual shape");
                code = dict_code(&c->nested[k], c->key.b, c->key.n, v);
                if (code < 0 || (hashed && ncache_put(&c->seen[k], h, v, code) < 0)) return no(x, "out of memory");
            }
            c->ncodes[k * n + i] = (uint32_t)code;
        }
        if (i >= n - 64) { /* fr_decode._newest: the latest (time_created_ns, record_id) of the last 64 */
            int64_t t = c->valid[F_TIME * n + i] ? c->ints[F_TIME * n + i] : -1;
            int64_t r = c->valid[F_RECORD_ID * n + i] ? c->ints[F_RECORD_ID * n + i] : -1;
            if (t > c->newest_t || (t == c->newest_t && r > c->newest_r)) { c->newest_t = t; c->newest_r = r; }
        }
    }
    return x->why ? -1 : 0;
}

/* ---- the top level ----------------------------------------------------------------------------------------- */

static const char *META[] = {"version", "comm_lib_version", "nccl_version", "pg_config", "pg_status"};
#define N_META 5

/* the top-level dict's metadata values (last wins, like a dict) and its entries list; no Python object */
static int top_level(Dec *x, int64_t root, int64_t *entries, int64_t *pick) {
    int64_t key, val;
    Iter it;
    *entries = -1;
    for (int j = 0; j < N_META; j++) pick[j] = -1;
    if (x->nodes[root].t != T_DICT) return no(x, "the top level is not a dict");
    iter(x, root, &it);
    while ((key = next_kid(x, &it)) >= 0) {
        if ((val = next_kid(x, &it)) < 0) return no(x, "odd dict");
        if (str_is(x, key, "entries")) *entries = val;
        for (int j = 0; j < N_META; j++) if (str_is(x, key, META[j])) pick[j] = val;
    }
    if (x->why) return -1;
    if (*entries < 0 || x->nodes[*entries].t != T_LIST) return no(x, "no entries list");
    return 0;
}

static PyObject *meta_of(Dec *x, const int64_t *pick) {
    PyObject *meta = PyDict_New();
    for (int j = 0; meta && j < N_META; j++) {
        if (pick[j] < 0) continue;
        PyObject *v = to_py(x, pick[j], 1);
        if (!v || PyDict_SetItemString(meta, META[j], v) < 0) Py_CLEAR(meta);
        Py_XDECREF(v);
    }
    return meta;
}

/* ---- Dumped: one decoded dump waiting to be added to its load ---------------------------------------------- */

typedef struct {
    PyObject_HEAD
    Cols c;
    PyObject *vals[N_NEST]; /* per local nested code: its value, or None when the load had it already */
    void *job;              /* the Job that decoded it (only that one may add it) */
} Dumped;

static void dumped_dealloc(Dumped *self) {
    cols_free(&self->c);
    for (int k = 0; k < N_NEST; k++) Py_XDECREF(self->vals[k]);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject DumpedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ncclpm.ingest.flight_recorder._frdecode.Dumped",
    .tp_basicsize = sizeof(Dumped),
    .tp_dealloc = (destructor)dumped_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "one decoded dump, for Job.add",
};

/* ---- Column: one column of rows handed to polars without a copy (the Arrow C data interface) ------------------ */

struct ArrowSchema {
    const char *format, *name, *metadata;
    int64_t flags, n_children;
    struct ArrowSchema **children, *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};
struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children, *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* a column's memory: shared by the Column and every array exported from it, freed by the last of them (polars may
 * drop its array on any thread, without the GIL: the raw allocator and an atomic count) */
typedef struct { void *data; atomic_long refs; const void *buffers[2]; } Mem;

static void mem_drop(Mem *m) {
    if (atomic_fetch_sub(&m->refs, 1) != 1) return;
    PyMem_RawFree(m->data);
    PyMem_RawFree(m);
}

typedef struct {
    PyObject_HEAD
    Mem *mem;
    int64_t n;
    const char *format; /* Arrow's: "i" Int32, "l" Int64, "C" UInt8, "I" UInt32 */
} Column;

static void column_dealloc(Column *self) {
    if (self->mem) mem_drop(self->mem);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void schema_release(struct ArrowSchema *s) { s->release = NULL; }

static void array_release(struct ArrowArray *a) {
    mem_drop(a->private_data);
    a->release = NULL;
}

static void schema_capsule_free(PyObject *c) {
    struct ArrowSchema *s = PyCapsule_GetPointer(c, "arrow_schema");
    if (s && s->release) s->release(s);
    PyMem_RawFree(s);
}

static void array_capsule_free(PyObject *c) {
    struct ArrowArray *a = PyCapsule_GetPointer(c, "arrow_array");
    if (a && a->release) a->release(a);
    PyMem_RawFree(a);
}

/* __arrow_c_array__(requested_schema=None): the column as an Arrow primitive array sharing its memory */
static PyObject *column_arrow(Column *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &requested)) return NULL;
    struct ArrowSchema *s = PyMem_RawCalloc(1, sizeof *s);
    struct ArrowArray *a = PyMem_RawCalloc(1, sizeof *a);
    if (!s || !a) { PyMem_RawFree(s); PyMem_RawFree(a); return PyErr_NoMemory(); }
    *s = (struct ArrowSchema){.format = self->format, .name = "", .flags = 0, .release = schema_release};
    atomic_fetch_add(&self->mem->refs, 1);
    *a = (struct ArrowArray){.length = self->n, .n_buffers = 2, .buffers = self->mem->buffers,
                             .release = array_release, .private_data = self->mem};
    PyObject *sc = PyCapsule_New(s, "arrow_schema", schema_capsule_free);
    if (!sc) { PyMem_RawFree(s); array_release(a); PyMem_RawFree(a); return NULL; }
    PyObject *ac = PyCapsule_New(a, "arrow_array", array_capsule_free);
    if (!ac) { Py_DECREF(sc); array_release(a); PyMem_RawFree(a); return NULL; }
    return Py_BuildValue("NN", sc, ac);
}

static Py_ssize_t column_len(Column *self) { return (Py_ssize_t)self->n; }

static PyMethodDef column_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))column_arrow, METH_VARARGS | METH_KEYWORDS,
     "The column as an Arrow array sharing this memory."},
    {NULL, NULL, 0, NULL},
};
static PySequenceMethods column_seq = {.sq_length = (lenfunc)column_len};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ncclpm.ingest.flight_recorder._frdecode.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = (destructor)column_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "a column of rows (pl.Series(column) imports it without a copy)",
    .tp_methods = column_methods,
    .tp_as_sequence = &column_seq,
};

/* a Column taking over `*data` (n values of `format`); *data is NULL after */
static PyObject *column_of(void **data, int64_t n, const char *format) {
    Mem *m = PyMem_RawMalloc(sizeof *m);
    Column *c = m ? PyObject_New(Column, &ColumnType) : NULL;
    if (!c) { PyMem_RawFree(m); return PyErr_NoMemory(); }
    m->data = *data ? *data : PyMem_RawMalloc(1);
    *data = NULL;
    if (!m->data) { PyMem_RawFree(m); c->mem = NULL; Py_DECREF(c); return PyErr_NoMemory(); }
    atomic_init(&m->refs, 1);
    m->buffers[0] = NULL;
    m->buffers[1] = m->data;
    c->mem = m; c->n = n; c->format = format;
    return (PyObject *)c;
}

/* an Int64 column whose values all fit 32 bits as Int32 (a new buffer; the table holds these counters as Int32 where
 * they fit, `fr_decode.NARROW`: polars' cast of 128k rows cost more than this loop); its Arrow format */
static const char *narrowed(int64_t **data, int64_t n) {
    int64_t *v = *data;
    for (int64_t i = 0; i < n; i++) if (v[i] < INT32_MIN || v[i] > INT32_MAX) return "l";
    int32_t *w = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!w) return "l";
    for (int64_t i = 0; i < n; i++) w[i] = (int32_t)v[i];
    PyMem_RawFree(v);
    *data = (int64_t *)w;
    return "i";
}

/* ---- Job: a load's dictionaries and rows --------------------------------------------------------------------- */

#define POOL 8

typedef struct {
    PyObject_HEAD
    int64_t keep, hint; /* hint: the rows a take() usually gets (room for them is made at once) */
    Dict strings, nested[N_NEST];
    int64_t strings_taken, nested_taken[N_NEST]; /* codes below these were handed to Python by take() */
    PyObject *new_vals[N_NEST];                  /* values of the codes from nested_taken on */
    int64_t rows, cap;
    int32_t *rank; int64_t *uid;
    int64_t *ints[N_INT]; uint8_t *bools[N_BOOL]; uint8_t *valid[N_VALID];
    uint32_t *scodes[N_STRCOL]; uint32_t *ncodes[N_NEST];
    int any_invalid;
    Dec *pool[POOL]; int npool; /* machines' working arrays, kept between dumps: fresh pages cost more */
} Job;

static void dec_free(Dec *x) {
    if (!x) return;
    PyMem_RawFree(x->nodes); PyMem_RawFree(x->segs); PyMem_RawFree(x->pool); PyMem_RawFree(x->stack);
    PyMem_RawFree(x->marks); PyMem_RawFree(x->memo);
    PyMem_RawFree(x);
}

static void rows_free(Job *j) {
    PyMem_RawFree(j->rank); PyMem_RawFree(j->uid);
    for (int f = 0; f < N_INT; f++) PyMem_RawFree(j->ints[f]);
    for (int f = 0; f < N_BOOL; f++) PyMem_RawFree(j->bools[f]);
    for (int f = 0; f < N_VALID; f++) PyMem_RawFree(j->valid[f]);
    for (int f = 0; f < N_STRCOL; f++) PyMem_RawFree(j->scodes[f]);
    for (int k = 0; k < N_NEST; k++) PyMem_RawFree(j->ncodes[k]);
    j->rank = NULL; j->uid = NULL;
    memset(j->ints, 0, sizeof j->ints); memset(j->bools, 0, sizeof j->bools); memset(j->valid, 0, sizeof j->valid);
    memset(j->scodes, 0, sizeof j->scodes); memset(j->ncodes, 0, sizeof j->ncodes);
    j->rows = j->cap = 0;
}

static void pool_free(Job *j) {
    for (int i = 0; i < j->npool; i++) dec_free(j->pool[i]);
    j->npool = 0;
}

static void job_dealloc(Job *self) {
    pool_free(self);
    rows_free(self);
    dict_free(&self->strings);
    for (int k = 0; k < N_NEST; k++) { dict_free(&self->nested[k]); Py_XDECREF(self->new_vals[k]); }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int job_init(Job *self, PyObject *args, PyObject *kw) {
    long long keep, hint = 0;
    if (!PyArg_ParseTuple(args, "L|L", &keep, &hint)) return -1;
    self->keep = keep;
    self->hint = hint > 0 && hint < (1LL << 31) ? hint : 0;
    for (int k = 0; k < N_NEST; k++) {
        Py_XSETREF(self->new_vals[k], PyList_New(0));
        if (!self->new_vals[k]) return -1;
    }
    return 0;
}

/* a machine for one dump: from the pool (GIL held) or new; its counts start at 0 */
static Dec *dec_get(Job *j) {
    Dec *x = j->npool ? j->pool[--j->npool] : PyMem_RawCalloc(1, sizeof(Dec));
    if (!x) return NULL;
    if (x->memo) memset(x->memo, 0, (size_t)x->memo_hi * sizeof(Id));
    x->nnode = x->nseg = x->npool = x->sp = x->nmarks = x->nmemo = x->memo_hi = 0;
    x->visits = 0; x->why = NULL;
    return x;
}

static void dec_put(Job *j, Dec *x) {
    if (j->npool < POOL) j->pool[j->npool++] = x;
    else dec_free(x);
}

/* (n, newest_t, newest_r, meta, Dumped) or a str: why the dump is left to the Python path */
static PyObject *job_decode(Job *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    Dec *x = dec_get(self);
    Dumped *out = x ? PyObject_New(Dumped, &DumpedType) : NULL;
    if (!out) {
        PyBuffer_Release(&buf);
        if (x) dec_put(self, x);
        return PyErr_NoMemory();
    }
    memset(&out->c, 0, sizeof out->c);
    for (int k = 0; k < N_NEST; k++) out->vals[k] = NULL;
    out->job = self;
    x->d = (const unsigned char *)buf.buf;
    x->n = buf.len;
    uint64_t per_byte = (uint64_t)PER_BYTE * (uint64_t)buf.len;
    x->budget = per_byte > MIN_BUDGET ? per_byte : MIN_BUDGET; /* fr_scan.budget_for */
    x->limit = 32 * (int64_t)buf.len + (1 << 20);
    int64_t root = -1, entries = -1, pick[N_META];
    int ok;
    Py_BEGIN_ALLOW_THREADS
    root = x->n > 0 && x->d[0] == 0x80 ? run(x) : no(x, "not a pickle");
    ok = root >= 0 && top_level(x, root, &entries, pick) == 0 && columns(x, entries, self->keep, &out->c) == 0;
    Py_END_ALLOW_THREADS
    PyObject *meta = NULL, *res = NULL;
    if (ok && !x->why) meta = meta_of(x, pick);
    for (int k = 0; meta && k < N_NEST; k++) { /* the values the load has not seen yet */
        Dict *t = &out->c.nested[k];
        out->vals[k] = PyList_New(t->count);
        for (int64_t i = 0; out->vals[k] && i < t->count; i++) {
            PyObject *v;
            if (dict_find(&self->nested[k], t->arena + t->off[i], t->len[i]) >= 0) v = (Py_INCREF(Py_None), Py_None);
            else v = to_py(x, t->node[i], 1);
            if (!v) { Py_CLEAR(out->vals[k]); break; }
            PyList_SET_ITEM(out->vals[k], i, v);
        }
        if (!out->vals[k]) Py_CLEAR(meta);
    }
    if (meta && !x->why) {
        PyMem_RawFree(out->c.key.b); out->c.key = (Buf){0};
        res = Py_BuildValue("(nLLNN)", (Py_ssize_t)out->c.n, (long long)out->c.newest_t,
                            (long long)out->c.newest_r, meta, (PyObject *)out);
        meta = NULL; out = NULL;
    }
    Py_XDECREF(meta);
    Py_XDECREF(out);
    PyBuffer_Release(&buf);
    const char *why = x->why;
    dec_put(self, x);
    if (res) return res;
    if (PyErr_Occurred()) {
        PyErr_Clear(); /* the Python path says what is wrong with this dump */
        if (!why) why = "a value Python refuses";
    }
    return PyUnicode_FromString(why ? why : "not read");
}

static int rows_room(Job *j, int64_t more) {
    if (j->rows + more <= j->cap) return 0;
    int64_t cap = j->cap ? j->cap : j->hint > (1 << 14) ? j->hint : 1 << 14; /* growing by copies cost more */
    while (cap < j->rows + more) cap *= 2;
#define RE(p, T) do { void *q = PyMem_RawRealloc((p), (size_t)cap * sizeof(T)); if (!q) return -1; (p) = q; } while (0)
    RE(j->rank, int32_t); RE(j->uid, int64_t);
    for (int f = 0; f < N_INT; f++) RE(j->ints[f], int64_t);
    for (int f = 0; f < N_BOOL; f++) RE(j->bools[f], uint8_t);
    for (int f = 0; f < N_VALID; f++) RE(j->valid[f], uint8_t);
    for (int f = 0; f < N_STRCOL; f++) RE(j->scodes[f], uint32_t);
    for (int k = 0; k < N_NEST; k++) RE(j->ncodes[k], uint32_t);
#undef RE
    j->cap = cap;
    return 0;
}

/* local codes -> the load's (NONE stays NONE) */
static int remap(Dict *into, Dict *local, int64_t **map) {
    *map = PyMem_RawMalloc((size_t)(local->count ? local->count : 1) * sizeof(int64_t));
    if (!*map) return -1;
    for (int64_t i = 0; i < local->count; i++)
        if (((*map)[i] = dict_code(into, local->arena + local->off[i], local->len[i], -1)) < 0) return -1;
    return 0;
}

static PyObject *job_add(Job *self, PyObject *args) {
    PyObject *obj;
    int rank;
    long long uid;
    if (!PyArg_ParseTuple(args, "O!iL", &DumpedType, &obj, &rank, &uid)) return NULL;
    Dumped *dm = (Dumped *)obj;
    Cols *c = &dm->c;
    if (dm->job != self || !c->ints) {
        PyErr_SetString(PyExc_ValueError, "a dump decoded by another load, or added already");
        return NULL;
    }
    int64_t n = c->n, *smap = NULL, *nmap[N_NEST] = {NULL, NULL, NULL};
    int failed = rows_room(self, n) < 0 || remap(&self->strings, &c->strings, &smap) < 0;
    for (int k = 0; !failed && k < N_NEST; k++) {
        int64_t before = self->nested[k].count;
        failed = remap(&self->nested[k], &c->nested[k], &nmap[k]) < 0;
        for (int64_t i = 0; !failed && i < c->nested[k].count; i++) {
            if (nmap[k][i] < before) continue; /* the load has it */
            PyObject *v = PyList_GET_ITEM(dm->vals[k], i);
            if (v == Py_None) { PyErr_SetString(PyExc_RuntimeError, "a nested value went missing"); break; }
            if (PyList_Append(self->new_vals[k], v) < 0) break;
        }
        if (PyErr_Occurred()) failed = 1;
    }
    if (!failed) {
        int64_t r = self->rows;
        for (int64_t i = 0; i < n; i++) { self->rank[r + i] = rank; self->uid[r + i] = uid; }
        for (int f = 0; f < N_INT; f++) memcpy(self->ints[f] + r, c->ints + f * n, (size_t)n * sizeof(int64_t));
        for (int f = 0; f < N_BOOL; f++) memcpy(self->bools[f] + r, c->bools + f * n, (size_t)n);
        for (int f = 0; f < N_VALID; f++) {
            memcpy(self->valid[f] + r, c->valid + f * n, (size_t)n);
            if (memchr(c->valid + f * n, 0, (size_t)n)) self->any_invalid = 1;
        }
        for (int f = 0; f < N_STRCOL; f++)
            for (int64_t i = 0; i < n; i++) {
                uint32_t code = c->scodes[f * n + i];
                self->scodes[f][r + i] = code == NONE_CODE ? NONE_CODE : (uint32_t)smap[code];
            }
        for (int k = 0; k < N_NEST; k++)
            for (int64_t i = 0; i < n; i++) {
                uint32_t code = c->ncodes[k * n + i];
                self->ncodes[k][r + i] = code == NONE_CODE ? NONE_CODE : (uint32_t)nmap[k][code];
            }
        self->rows += n;
    }
    PyMem_RawFree(smap);
    for (int k = 0; k < N_NEST; k++) PyMem_RawFree(nmap[k]);
    cols_free(c); /* added (or not): either way its memory goes now */
    for (int k = 0; k < N_NEST; k++) Py_CLEAR(dm->vals[k]);
    if (failed) return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* a code column: NONE -> `none` (the caller appends a null there) */
static void nulls_at(uint32_t *codes, int64_t n, int64_t none) {
    for (int64_t i = 0; i < n; i++) if (codes[i] == NONE_CODE) codes[i] = (uint32_t)none;
}

static PyObject *decoded_list(Dict *t, int64_t from, int ascii_keys) {
    PyObject *out = PyList_New(t->count - from);
    for (int64_t i = from; out && i < t->count; i++) {
        PyObject *v = ascii_keys ? PyUnicode_DecodeASCII(t->arena + t->off[i], t->len[i], NULL)
                                 : PyUnicode_DecodeUTF8(t->arena + t->off[i], t->len[i], NULL);
        if (!v) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i - from, v);
    }
    return out;
}

/* the rows added since the last take (Columns: their memory goes with them) and the distinct values new since
 * then; the rows start again at 0 */
static PyObject *job_take(Job *self, PyObject *unused) {
    int64_t n = self->rows;
    PyObject *d = PyDict_New(), *v;
    if (!d) return NULL;
#define SET(key, expr) do { v = (expr); if (!v || PyDict_SetItemString(d, key, v) < 0) { Py_XDECREF(v); goto fail; } Py_DECREF(v); } while (0)
#define COL(p, fmt) column_of((void **)&(p), n, fmt)
    static const char *INTS[N_INT] = {"record_id", "pg_id", "collective_seq_id", "time_created_ns"};
    static const char *BOOLS[N_BOOL] = {"is_p2p", "retired"};
    static const char *TEXTS[N_STRCOL] = {"profiling_name", "state", "pg_name", "pg_desc"};
    static const char *NESTS[N_NEST] = {"input_sizes", "input_dtypes", "frames"};
    for (int f = 0; f < N_STRCOL; f++) nulls_at(self->scodes[f], n, self->strings.count);
    for (int k = 0; k < N_NEST; k++) nulls_at(self->ncodes[k], n, self->nested[k].count);
    SET("rows", PyLong_FromLongLong(n));
    SET("rank", COL(self->rank, "i"));
    SET("_id", COL(self->uid, "l"));
    for (int f = 0; f < N_INT; f++) /* the counters Int32 where they fit; the times stay Int64 */
        SET(INTS[f], COL(self->ints[f], f == F_TIME ? "l" : narrowed(&self->ints[f], n)));
    for (int f = 0; f < N_BOOL; f++) SET(BOOLS[f], COL(self->bools[f], "C"));
    if (self->any_invalid) {
        PyObject *valid = PyDict_New();
        for (int f = 0; valid && f < N_VALID; f++) {
            PyObject *b = COL(self->valid[f], "C");
            if (!b || PyDict_SetItemString(valid, f < N_INT ? INTS[f] : BOOLS[f - N_INT], b) < 0) Py_CLEAR(valid);
            Py_XDECREF(b);
        }
        SET("valid", valid);
    } else SET("valid", (Py_INCREF(Py_None), Py_None));
    for (int f = 0; f < N_STRCOL; f++) SET(TEXTS[f], COL(self->scodes[f], "I"));
    SET("strings", decoded_list(&self->strings, self->strings_taken, 0));
    for (int k = 0; k < N_NEST; k++) {
        PyObject *keys = decoded_list(&self->nested[k], self->nested_taken[k], 1), *codes = keys ? COL(self->ncodes[k], "I") : NULL;
        if (!codes) { Py_XDECREF(keys); goto fail; }
        PyObject *vals = self->new_vals[k];
        if (!(self->new_vals[k] = PyList_New(0))) { self->new_vals[k] = vals; Py_DECREF(codes); Py_DECREF(keys); goto fail; }
        SET(NESTS[k], Py_BuildValue("(NNN)", codes, keys, vals));
    }
#undef COL
#undef SET
    self->strings_taken = self->strings.count;
    for (int k = 0; k < N_NEST; k++) self->nested_taken[k] = self->nested[k].count;
    rows_free(self); /* what was not handed over (the validity when all valid) */
    self->any_invalid = 0;
    return d;
fail:
    Py_DECREF(d);
    rows_free(self); /* the rows are lost: the caller says which dumps */
    return NULL;
}

static PyObject *job_rows(Job *self, void *unused) { return PyLong_FromLongLong(self->rows); }

static PyObject *job_release(Job *self, PyObject *unused) {
    pool_free(self);
    rows_free(self);
    Py_RETURN_NONE;
}

static PyMethodDef job_methods[] = {
    {"decode", (PyCFunction)job_decode, METH_VARARGS,
     "decode(data) -> (n, newest_t, newest_r, meta, dumped) or a str: why the dump is left to the Python path "
     "(runs without the GIL: threads may decode dumps at once)"},
    {"add", (PyCFunction)job_add, METH_VARARGS, "add(dumped, rank, uid): its rows after the others (in dump order)"},
    {"take", (PyCFunction)job_take, METH_NOARGS, "take() -> the rows since the last take and the new distinct values"},
    {"release", (PyCFunction)job_release, METH_NOARGS, "release() frees the working arrays and the rows' buffers"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef job_getset[] = {
    {"rows", (getter)job_rows, NULL, "rows added since the last take", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject JobType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ncclpm.ingest.flight_recorder._frdecode.Job",
    .tp_basicsize = sizeof(Job),
    .tp_dealloc = (destructor)job_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Job(keep_frames, rows_hint=0): one load's dictionaries and rows",
    .tp_methods = job_methods,
    .tp_getset = job_getset,
    .tp_init = (initproc)job_init,
    .tp_new = PyType_GenericNew,
};

/* ---- module ------------------------------------------------------------------------------------------------- */

static PyObject *release(PyObject *self, PyObject *unused) {
#ifdef __GLIBC__
    /* the dumps' bytes (~0.5 MB each) came from the heap once glibc's mmap threshold had risen past their size; the
     * holes they leave stay in the process (~5 MB at 256 dumps) unless handed back here, after the last dump */
    malloc_trim(0);
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"release", release, METH_NOARGS, "release() hands the heap's free pages back (after the last dump)"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frdecode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__frdecode(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    hash_seed ^= ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&ts;
    if (PyType_Ready(&DumpedType) < 0 || PyType_Ready(&JobType) < 0 || PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&JobType);
    if (PyModule_AddObject(m, "Job", (PyObject *)&JobType) < 0) { Py_DECREF(&JobType); Py_DECREF(m); return NULL; }
    return m;
}
