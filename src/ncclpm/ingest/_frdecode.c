/* One flight-recorder pickle -> the analysis columns of fr_decode, without a Python object per value.
 *
 * decode(data, keep_frames) walks the pickle opcodes into a small tree of C nodes (strings point into `data`),
 * then writes each entry's analysis fields into fixed-width buffers: Int64 values, Booleans, UInt32 codes into
 * the dump's distinct strings, and UInt32 codes into its distinct nested values keyed by their Python repr (the
 * key fr_decode._Interner uses).  It returns a str (why this dump is left to the Python path) for anything it
 * does not read exactly as pickle.Unpickler + fr_decode would: other opcodes, protocol-0/1 forms, big ints,
 * sets, bytes, a structure or type the dump layout does not have.  Every read is bounded by the data, nesting
 * by MAX_DEPTH, memo indices by the scan's slack; the caller runs the opcode scan (_frscan) first as well.
 * Optional: built by hatch_build.py when a C compiler is present. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 40
#define MEMO_SLACK 256
#define MAX_NESTED 65536
#define MAX_KEY_BYTES (1 << 24)

enum { T_NONE, T_TRUE, T_FALSE, T_INT, T_FLOAT, T_STR, T_LIST, T_TUPLE, T_DICT };
typedef struct { int64_t v, w; int64_t first, last; uint8_t t, ascii; int8_t field; } Node; /* STR: v=offset w=len; box: w=count */
typedef struct { int64_t start, len, next; } Seg;                              /* a run of kids in the pool */

typedef struct {
    const unsigned char *d; Py_ssize_t n;
    Node *nodes; int64_t nnode, capnode;
    Seg *segs; int64_t nseg, capseg;
    int64_t *pool; int64_t npool, cappool;
    int64_t *stack; int64_t sp, capstack;
    int64_t *marks; int64_t nmarks, capmarks;
    int64_t *memo; int64_t capmemo, nmemo; /* memo[i] = node + 1, 0 = unset */
    int64_t visits, limit; /* kids visited while reading the tree: shared values cost each time (a bomb) */
    const char *why;
} Dec;

static int grow(void **buf, int64_t *cap, int64_t need, size_t item) {
    if (need <= *cap) return 0;
    int64_t n = *cap ? *cap : 256;
    while (n < need) n *= 2;
    if ((uint64_t)n > SIZE_MAX / item) return -1;
    void *p = PyMem_RawRealloc(*buf, (size_t)n * item);
    if (!p) return -1;
    *buf = p; *cap = n;
    return 0;
}
#define GROW(dec, arr, cnt, cap, need) grow((void **)&(dec)->arr, &(dec)->cap, (need), sizeof(*(dec)->arr))

static int no(Dec *x, const char *why) { x->why = why; return -1; }

static int64_t node(Dec *x, uint8_t t) {
    if (GROW(x, nodes, nnode, capnode, x->nnode + 1) < 0) return no(x, "out of memory");
    x->nodes[x->nnode] = (Node){0, 0, -1, -1, t, 1, -3};
    return x->nnode++;
}

static int push(Dec *x, int64_t r) {
    if (r < 0) return -1;
    if (GROW(x, stack, sp, capstack, x->sp + 1) < 0) return no(x, "out of memory");
    x->stack[x->sp++] = r;
    return 0;
}

static int64_t fence(Dec *x) { return x->nmarks ? x->marks[x->nmarks - 1] : 0; }

/* stack[from:to] become kids of container `c` (appended as one segment) */
static int add_kids(Dec *x, int64_t c, int64_t from, int64_t to) {
    if (to <= from) return 0;
    if (GROW(x, pool, npool, cappool, x->npool + (to - from)) < 0) return no(x, "out of memory");
    if (GROW(x, segs, nseg, capseg, x->nseg + 1) < 0) return no(x, "out of memory");
    memcpy(x->pool + x->npool, x->stack + from, (size_t)(to - from) * sizeof(int64_t));
    x->segs[x->nseg] = (Seg){x->npool, to - from, -1};
    x->npool += to - from;
    Node *nd = &x->nodes[c];
    if (nd->last >= 0) x->segs[nd->last].next = x->nseg; else nd->first = x->nseg;
    nd->last = x->nseg++;
    nd->w += to - from;
    return 0;
}

static int hashable(Dec *x, int64_t k) {
    uint8_t t = x->nodes[k].t;
    return t != T_LIST && t != T_DICT && t != T_TUPLE; /* tuples could be keys; the dump layout has none */
}

static int dict_items(Dec *x, int64_t c, int64_t from, int64_t to) {
    if (x->nodes[c].t != T_DICT) return no(x, "items set on a non-dict");
    if ((to - from) % 2) return no(x, "odd number of dict items");
    for (int64_t i = from; i < to; i += 2)
        if (!hashable(x, x->stack[i])) return no(x, "a dict key of an unusual type");
    return add_kids(x, c, from, to);
}

static int64_t box(Dec *x, uint8_t t, int64_t from, int64_t to) {
    int64_t c = node(x, t);
    if (c < 0) return -1;
    if (t == T_DICT && dict_items(x, c, from, to) < 0) return -1;
    if (t != T_DICT && add_kids(x, c, from, to) < 0) return -1;
    return c;
}

static int pop_mark(Dec *x, int64_t *at) {
    if (!x->nmarks) return no(x, "no mark");
    *at = x->marks[--x->nmarks];
    if (*at > x->sp) return no(x, "bad mark");
    return 0;
}

static int memo_put(Dec *x, uint64_t idx) {
    if (x->sp <= fence(x)) return no(x, "memo put on an empty stack");
    if (idx > (uint64_t)(x->nmemo + MEMO_SLACK)) return no(x, "memo index far ahead");
    int64_t old = x->capmemo;
    if (GROW(x, memo, nmemo, capmemo, (int64_t)idx + 1) < 0) return no(x, "out of memory");
    if (x->capmemo > old) memset(x->memo + old, 0, (size_t)(x->capmemo - old) * sizeof(int64_t));
    if (!x->memo[idx]) x->nmemo++;
    x->memo[idx] = x->stack[x->sp - 1] + 1;
    return 0;
}

static int memo_get(Dec *x, uint64_t idx) {
    if (idx >= (uint64_t)x->capmemo || !x->memo[idx]) return no(x, "memo index never set");
    return push(x, x->memo[idx] - 1);
}

static uint64_t le(const unsigned char *p, int w) {
    uint64_t v = 0;
    for (int i = w - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* UTF-8 as pickle decodes it ('surrogatepass'); *ascii = whether every byte is < 0x80 */
static int utf8_ok(const unsigned char *s, int64_t n, uint8_t *ascii) {
    int64_t i = 0;
    *ascii = 1;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        *ascii = 0;
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0;
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90)) return 0;
            i += 4;
        } else return 0;
    }
    return 1;
}

static int need(Dec *x, Py_ssize_t pos, uint64_t k) {
    if (k > (uint64_t)(x->n - pos)) return no(x, "truncated");
    return 0;
}

/* the pickle machine, on nodes; returns the root node or -1 */
static int64_t run(Dec *x) {
    const unsigned char *d = x->d;
    Py_ssize_t n = x->n, pos = 0;
    int64_t at, r;
    while (pos < n) {
        int op = d[pos++];
        switch (op) {
        case 0x80: /* PROTO */
            if (need(x, pos, 1) < 0) return -1;
            if (d[pos] > 5) return no(x, "unsupported protocol");
            pos += 1; break;
        case 0x95: /* FRAME */
            if (need(x, pos, 8) < 0) return -1;
            if (need(x, pos + 8, le(d + pos, 8)) < 0) return -1;
            pos += 8; break;
        case 0x7D: if (push(x, node(x, T_DICT)) < 0) return -1; break;   /* EMPTY_DICT */
        case 0x5D: if (push(x, node(x, T_LIST)) < 0) return -1; break;   /* EMPTY_LIST */
        case 0x29: if (push(x, node(x, T_TUPLE)) < 0) return -1; break;  /* EMPTY_TUPLE */
        case 0x4E: if (push(x, node(x, T_NONE)) < 0) return -1; break;   /* NONE */
        case 0x88: if (push(x, node(x, T_TRUE)) < 0) return -1; break;   /* NEWTRUE */
        case 0x89: if (push(x, node(x, T_FALSE)) < 0) return -1; break;  /* NEWFALSE */
        case 0x28: /* MARK */
            if (GROW(x, marks, nmarks, capmarks, x->nmarks + 1) < 0) return no(x, "out of memory");
            x->marks[x->nmarks++] = x->sp; break;
        case 0x94: if (memo_put(x, (uint64_t)x->nmemo) < 0) return -1; break; /* MEMOIZE */
        case 0x71: /* BINPUT */
            if (need(x, pos, 1) < 0 || memo_put(x, d[pos]) < 0) return -1;
            pos += 1; break;
        case 0x72: /* LONG_BINPUT */
            if (need(x, pos, 4) < 0 || memo_put(x, le(d + pos, 4)) < 0) return -1;
            pos += 4; break;
        case 0x68: /* BINGET */
            if (need(x, pos, 1) < 0 || memo_get(x, d[pos]) < 0) return -1;
            pos += 1; break;
        case 0x6A: /* LONG_BINGET */
            if (need(x, pos, 4) < 0 || memo_get(x, le(d + pos, 4)) < 0) return -1;
            pos += 4; break;
        case 0x4B: case 0x4D: case 0x4A: case 0x8A: { /* BININT1, BININT2, BININT, LONG1 */
            int w = op == 0x4B ? 1 : op == 0x4D ? 2 : 4;
            int64_t v;
            if (op == 0x8A) {
                if (need(x, pos, 1) < 0) return -1;
                w = d[pos++];
                if (w > 8) return no(x, "an int past 64 bits");
            }
            if (need(x, pos, (uint64_t)w) < 0) return -1;
            uint64_t u = w ? le(d + pos, w) : 0;
            if (op == 0x4A || op == 0x8A) { /* signed, two's complement of w bytes */
                if (w && w < 8 && (u >> (8 * w - 1)) & 1) u |= ~(uint64_t)0 << (8 * w);
            }
            memcpy(&v, &u, sizeof v);
            pos += w;
            if ((r = node(x, T_INT)) < 0) return -1;
            x->nodes[r].v = v;
            if (push(x, r) < 0) return -1;
            break;
        }
        case 0x47: { /* BINFLOAT, big-endian */
            if (need(x, pos, 8) < 0) return -1;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++) u = (u << 8) | d[pos + i];
            pos += 8;
            if ((r = node(x, T_FLOAT)) < 0) return -1;
            memcpy(&x->nodes[r].v, &u, sizeof u);
            if (push(x, r) < 0) return -1;
            break;
        }
        case 0x8C: case 0x58: case 0x8D: { /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
            int w = op == 0x8C ? 1 : op == 0x58 ? 4 : 8;
            if (need(x, pos, (uint64_t)w) < 0) return -1;
            uint64_t len = le(d + pos, w);
            pos += w;
            if (need(x, pos, len) < 0) return -1;
            if ((r = node(x, T_STR)) < 0) return -1;
            Node *s = &x->nodes[r];
            s->v = pos; s->w = (int64_t)len;
            if (!utf8_ok(d + pos, (int64_t)len, &s->ascii)) return no(x, "a string that is not UTF-8");
            pos += (Py_ssize_t)len;
            if (push(x, r) < 0) return -1;
            break;
        }
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            int64_t k = op - 0x84;
            if (x->sp - k < fence(x)) return no(x, "stack underflow");
            if ((r = box(x, T_TUPLE, x->sp - k, x->sp)) < 0) return -1;
            x->sp -= k;
            if (push(x, r) < 0) return -1;
            break;
        }
        case 0x74: case 0x6C: case 0x64: /* TUPLE, LIST, DICT */
            if (pop_mark(x, &at) < 0) return -1;
            if ((r = box(x, op == 0x74 ? T_TUPLE : op == 0x6C ? T_LIST : T_DICT, at, x->sp)) < 0) return -1;
            x->sp = at;
            if (push(x, r) < 0) return -1;
            break;
        case 0x61: /* APPEND */
            if (x->sp - 2 < fence(x)) return no(x, "stack underflow");
            if (x->nodes[x->stack[x->sp - 2]].t != T_LIST) return no(x, "append to a non-list");
            if (add_kids(x, x->stack[x->sp - 2], x->sp - 1, x->sp) < 0) return -1;
            x->sp -= 1; break;
        case 0x65: /* APPENDS */
            if (pop_mark(x, &at) < 0) return -1;
            if (at - 1 < fence(x)) return no(x, "stack underflow");
            if (x->nodes[x->stack[at - 1]].t != T_LIST) return no(x, "append to a non-list");
            if (add_kids(x, x->stack[at - 1], at, x->sp) < 0) return -1;
            x->sp = at; break;
        case 0x73: /* SETITEM */
            if (x->sp - 3 < fence(x)) return no(x, "stack underflow");
            if (dict_items(x, x->stack[x->sp - 3], x->sp - 2, x->sp) < 0) return -1;
            x->sp -= 2; break;
        case 0x75: /* SETITEMS */
            if (pop_mark(x, &at) < 0) return -1;
            if (at - 1 < fence(x)) return no(x, "stack underflow");
            if (dict_items(x, x->stack[at - 1], at, x->sp) < 0) return -1;
            x->sp = at; break;
        case 0x30: /* POP */
            if (x->nmarks && x->marks[x->nmarks - 1] == x->sp) x->nmarks--;
            else if (x->sp > fence(x)) x->sp--;
            else return no(x, "stack underflow");
            break;
        case 0x32: /* DUP */
            if (x->sp <= fence(x)) return no(x, "stack underflow");
            if (push(x, x->stack[x->sp - 1]) < 0) return -1;
            break;
        case 0x2E: /* STOP */
            if (x->sp <= fence(x)) return no(x, "stack underflow");
            return x->stack[x->sp - 1];
        default:
            return no(x, "an opcode the dump layout does not use");
        }
    }
    return no(x, "truncated");
}

/* ---- reading the tree ---------------------------------------------------------------------------------- */

typedef struct { int64_t seg, i; } Iter; /* walks a container's kids */
static void iter(Dec *x, int64_t c, Iter *it) { it->seg = x->nodes[c].first; it->i = 0; }
static int64_t next_kid(Dec *x, Iter *it) {
    while (it->seg >= 0 && it->i >= x->segs[it->seg].len) { it->seg = x->segs[it->seg].next; it->i = 0; }
    if (it->seg < 0) return -1;
    if (++x->visits > x->limit) { x->why = "expands too much (a reference bomb?)"; it->seg = -1; return -1; }
    return x->pool[x->segs[it->seg].start + it->i++];
}

static int str_is(Dec *x, int64_t k, const char *lit) {
    Node *s = &x->nodes[k];
    size_t len = strlen(lit);
    return s->t == T_STR && (size_t)s->w == len && memcmp(x->d + s->v, lit, len) == 0;
}

static PyObject *to_py(Dec *x, int64_t k, int depth);

static PyObject *to_py_box(Dec *x, int64_t k, int depth) {
    Node *nd = &x->nodes[k];
    Iter it;
    int64_t c, i = 0;
    iter(x, k, &it);
    if (nd->t == T_DICT) {
        PyObject *out = PyDict_New();
        while (out && (c = next_kid(x, &it)) >= 0) {
            int64_t v = next_kid(x, &it);
            PyObject *kk = to_py(x, c, depth + 1), *vv = v >= 0 ? to_py(x, v, depth + 1) : NULL;
            if (!kk || !vv || PyDict_SetItem(out, kk, vv) < 0) Py_CLEAR(out);
            Py_XDECREF(kk); Py_XDECREF(vv);
        }
        return out;
    }
    PyObject *out = nd->t == T_LIST ? PyList_New(nd->w) : PyTuple_New(nd->w);
    while (out && (c = next_kid(x, &it)) >= 0 && i < nd->w) {
        PyObject *v = to_py(x, c, depth + 1);
        if (!v) { Py_CLEAR(out); break; }
        if (nd->t == T_LIST) PyList_SET_ITEM(out, i, v); else PyTuple_SET_ITEM(out, i, v);
        i++;
    }
    if (out && i < nd->w) Py_CLEAR(out); /* cut short by the budget (list/tuple dealloc skips the NULL slots) */
    return out;
}

/* a node as the object pickle.Unpickler would make (NULL + Python error, or NULL + why) */
static PyObject *to_py(Dec *x, int64_t k, int depth) {
    Node *nd = &x->nodes[k];
    if (depth > MAX_DEPTH) { x->why = "nested too deep"; return NULL; }
    switch (nd->t) {
    case T_NONE: Py_RETURN_NONE;
    case T_TRUE: Py_RETURN_TRUE;
    case T_FALSE: Py_RETURN_FALSE;
    case T_INT: return PyLong_FromLongLong(nd->v);
    case T_FLOAT: { double f; memcpy(&f, &nd->v, sizeof f); return PyFloat_FromDouble(f); }
    case T_STR: return PyUnicode_DecodeUTF8((const char *)x->d + nd->v, nd->w, "surrogatepass");
    default: return to_py_box(x, k, depth);
    }
}

/* ---- byte-string dictionaries (distinct strings, distinct nested keys) ---------------------------------- */

typedef struct {
    char *arena; int64_t narena, caparena;
    int64_t *off, *len; int64_t count, capoff, caplen;
    int64_t *node; int64_t capnode; /* one node holding the value (for nested values) */
    int64_t *slots; int64_t nslots; /* index + 1, 0 = empty */
} Dict;

static uint64_t hash_bytes(const char *p, int64_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
    return h;
}

static void dict_free(Dict *t) {
    PyMem_RawFree(t->arena); PyMem_RawFree(t->off); PyMem_RawFree(t->len); PyMem_RawFree(t->node);
    PyMem_RawFree(t->slots);
}

/* the code of bytes p[0:n] (added if new), -1 on out of memory */
static int64_t dict_code(Dict *t, const char *p, int64_t n, int64_t nd) {
    if (t->count * 2 + 2 > t->nslots) {
        int64_t ns = t->nslots ? t->nslots * 2 : 64;
        int64_t *slots = PyMem_RawCalloc((size_t)ns, sizeof(int64_t));
        if (!slots) return -1;
        for (int64_t i = 0; i < t->count; i++) {
            uint64_t h = hash_bytes(t->arena + t->off[i], t->len[i]) & (uint64_t)(ns - 1);
            while (slots[h]) h = (h + 1) & (uint64_t)(ns - 1);
            slots[h] = i + 1;
        }
        PyMem_RawFree(t->slots);
        t->slots = slots; t->nslots = ns;
    }
    uint64_t h = hash_bytes(p, n) & (uint64_t)(t->nslots - 1);
    while (t->slots[h]) {
        int64_t i = t->slots[h] - 1;
        if (t->len[i] == n && memcmp(t->arena + t->off[i], p, (size_t)n) == 0) return i;
        h = (h + 1) & (uint64_t)(t->nslots - 1);
    }
    if (grow((void **)&t->arena, &t->caparena, t->narena + n + 1, 1) < 0 ||
        grow((void **)&t->off, &t->capoff, t->count + 1, sizeof(int64_t)) < 0 ||
        grow((void **)&t->len, &t->caplen, t->count + 1, sizeof(int64_t)) < 0 ||
        grow((void **)&t->node, &t->capnode, t->count + 1, sizeof(int64_t)) < 0)
        return -1;
    memcpy(t->arena + t->narena, p, (size_t)n);
    t->off[t->count] = t->narena; t->len[t->count] = n; t->node[t->count] = nd;
    t->narena += n;
    t->slots[h] = t->count + 1;
    return t->count++;
}

/* ---- repr keys of nested values (exactly Python's repr, for the shapes the checks accept) --------------- */

typedef struct { char *b; int64_t n, cap; } Buf;

static int put(Buf *b, const char *s, int64_t n) {
    if (b->n + n > MAX_KEY_BYTES) return -1;
    if (grow((void **)&b->b, &b->cap, b->n + n, 1) < 0) return -1;
    memcpy(b->b + b->n, s, (size_t)n);
    b->n += n;
    return 0;
}
static int puts_(Buf *b, const char *s) { return put(b, s, (int64_t)strlen(s)); }

static int repr_int(Buf *b, int64_t v) { /* "%lld", without printf's cost */
    char tmp[24];
    int k = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[--k] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) tmp[--k] = '-';
    return put(b, tmp + k, 24 - k);
}

static int repr_str(Dec *x, Buf *b, int64_t k) { /* printable ASCII without quote or backslash: repr = 'text' */
    Node *s = &x->nodes[k];
    const unsigned char *p = x->d + s->v;
    for (int64_t i = 0; i < s->w; i++)
        if (p[i] < 0x20 || p[i] > 0x7E || p[i] == '\'' || p[i] == '\\') return -1;
    return put(b, "'", 1) < 0 || put(b, (const char *)p, s->w) < 0 || put(b, "'", 1) < 0 ? -1 : 0;
}

enum { K_SIZES, K_DTYPES, K_FRAMES };

static int repr_frame(Dec *x, Buf *b, int64_t f) {
    static const char *names[3] = {"name", "filename", "line"};
    int seen[3] = {0, 0, 0};
    Iter it;
    int64_t key, val, first = 1;
    if (x->nodes[f].t != T_DICT) return -1;
    iter(x, f, &it);
    if (put(b, "{", 1) < 0) return -1;
    while ((key = next_kid(x, &it)) >= 0) {
        if ((val = next_kid(x, &it)) < 0) return -1;
        int which = -1;
        for (int j = 0; j < 3; j++) if (str_is(x, key, names[j])) which = j;
        if (which < 0 || seen[which]++) return -1; /* another key, or one given twice */
        if (!first && put(b, ", ", 2) < 0) return -1;
        first = 0;
        if (put(b, "'", 1) < 0 || puts_(b, names[which]) < 0 || put(b, "': ", 3) < 0) return -1;
        uint8_t t = x->nodes[val].t;
        if (t == T_NONE) { if (puts_(b, "None") < 0) return -1; }
        else if (which == 2 && t == T_INT) { if (repr_int(b, x->nodes[val].v) < 0) return -1; }
        else if (which < 2 && t == T_STR) { if (repr_str(x, b, val) < 0) return -1; }
        else return -1;
    }
    return put(b, "}", 1);
}

/* repr of a nested value of kind `kind` into b; -1 when its shape is not one this decoder reads */
static int repr_nested(Dec *x, Buf *b, int64_t k, int kind) {
    Node *nd = &x->nodes[k];
    if (nd->t != T_LIST && nd->t != T_TUPLE) return -1;
    if (nd->w > MAX_NESTED) return -1;
    int tuple = nd->t == T_TUPLE;
    Iter it;
    int64_t c, i = 0, total = 0;
    iter(x, k, &it);
    if (put(b, tuple ? "(" : "[", 1) < 0) return -1;
    while ((c = next_kid(x, &it)) >= 0) {
        if (i++ && put(b, ", ", 2) < 0) return -1;
        if (kind == K_DTYPES) {
            if (x->nodes[c].t != T_STR || repr_str(x, b, c) < 0) return -1;
        } else if (kind == K_FRAMES) {
            if (repr_frame(x, b, c) < 0) return -1;
        } else {
            Node *dims = &x->nodes[c];
            if (dims->t != T_LIST && dims->t != T_TUPLE) return -1;
            total += dims->w;
            if (total > MAX_NESTED) return -1;
            Iter jt;
            int64_t e, j = 0;
            iter(x, c, &jt);
            if (put(b, dims->t == T_TUPLE ? "(" : "[", 1) < 0) return -1;
            while ((e = next_kid(x, &jt)) >= 0) {
                if (x->nodes[e].t != T_INT) return -1;
                if ((j++ && put(b, ", ", 2) < 0) || repr_int(b, x->nodes[e].v) < 0) return -1;
            }
            if (dims->t == T_TUPLE && j == 1 && put(b, ",", 1) < 0) return -1;
            if (put(b, dims->t == T_TUPLE ? ")" : "]", 1) < 0) return -1;
        }
    }
    if (tuple && i == 1 && put(b, ",", 1) < 0) return -1;
    return put(b, tuple ? ")" : "]", 1);
}

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
    {"release", release, METH_NOARGS, "release() frees the arrays kept between decode() calls"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frdecode", NULL, -1, methods};
PyMODINIT_FUNC PyInit__frdecode(void) { return PyModule_Create(&module); }
