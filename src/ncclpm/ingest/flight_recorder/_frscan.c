/* The pickle opcode scan of ncclpm.ingest.fr_scan, in C (same verdicts and messages; fr_scan.py is the
 * reference and explains the rules).  Optional: built by hatch_build.py when a C compiler is present. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { IMM = 0, MUT = 1, FROZEN = 2 };
typedef struct { uint64_t size; int64_t depth; int flags; int container; } Rec;
typedef struct {
    Rec *recs; Py_ssize_t nrec, caprec;
    Py_ssize_t *stack; Py_ssize_t sp, capstack;
    Py_ssize_t *marks; Py_ssize_t nmarks, capmarks;
    Py_ssize_t *memo; Py_ssize_t capmemo, nmemo; /* memo[i] = record index + 1, 0 = unset */
    uint64_t limit; int64_t max_depth; Py_ssize_t slack;
    char err[256];
} Scan;

static int fail(Scan *s, const char *msg) { snprintf(s->err, sizeof s->err, "%s", msg); return -1; }

static int grow(void **buf, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *p = PyMem_RawRealloc(*buf, (size_t)n * item);
    if (!p) return -1;
    *buf = p; *cap = n;
    return 0;
}

static Py_ssize_t new_rec(Scan *s, uint64_t size, int64_t depth, int flags, int container) {
    if (grow((void **)&s->recs, &s->caprec, s->nrec + 1, sizeof(Rec)) < 0) return -1;
    s->recs[s->nrec] = (Rec){size, depth, flags, container};
    return s->nrec++;
}

static int push(Scan *s, Py_ssize_t r) {
    if (r < 0 || grow((void **)&s->stack, &s->capstack, s->sp + 1, sizeof(Py_ssize_t)) < 0) return fail(s, "out of memory");
    s->stack[s->sp++] = r;
    return 0;
}

static int check(Scan *s, uint64_t size, int64_t depth) {
    if (size > s->limit) {
        snprintf(s->err, sizeof s->err, "expands to more than %llu values counting references (a reference bomb?)",
                 (unsigned long long)s->limit);
        return -1;
    }
    if (depth > s->max_depth) {
        snprintf(s->err, sizeof s->err, "nested deeper than %lld levels", (long long)s->max_depth);
        return -1;
    }
    return 0;
}

static uint64_t sat_add(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

/* items = stack[from:to] into target record */
static int add(Scan *s, Py_ssize_t target, Py_ssize_t from, Py_ssize_t to) {
    Rec *t = &s->recs[target];
    if (!t->container || t->flags != MUT) {
        if (t->container && t->flags == FROZEN)
            return fail(s, "a value changed after a second reference to it was taken (a cycle?)");
        return fail(s, "corrupt (items added to something that is not a list, dict or set)");
    }
    uint64_t size = t->size; int64_t depth = t->depth;
    for (Py_ssize_t i = from; i < to; i++) {
        Rec *it = &s->recs[s->stack[i]];
        size = sat_add(size, it->size);
        if (it->depth >= depth) depth = it->depth + 1;
    }
    if (check(s, size, depth) < 0) return -1;
    t = &s->recs[target];
    t->size = size; t->depth = depth;
    return 0;
}

static Py_ssize_t build(Scan *s, Py_ssize_t from, Py_ssize_t to, int flags) {
    uint64_t size = 1; int64_t depth = 1;
    for (Py_ssize_t i = from; i < to; i++) {
        Rec *it = &s->recs[s->stack[i]];
        size = sat_add(size, it->size);
        if (it->depth >= depth) depth = it->depth + 1;
    }
    if (check(s, size, depth) < 0) return -2;
    return new_rec(s, size, depth, flags, 1);
}

static int pop_mark(Scan *s, Py_ssize_t *at) {
    if (!s->nmarks) return fail(s, "corrupt (no MARK to pop to)");
    *at = s->marks[--s->nmarks];
    if (*at > s->sp) *at = s->sp;
    return 0;
}

static int put(Scan *s, uint64_t idx) {
    if (!s->sp) return fail(s, "corrupt (memo put on an empty stack)");
    if (idx > (uint64_t)(s->nmemo + s->slack)) {
        snprintf(s->err, sizeof s->err, "memo index %llu far past the %lld values memoised (a memo table bomb?)",
                 (unsigned long long)idx, (long long)s->nmemo);
        return -1;
    }
    if (grow((void **)&s->memo, &s->capmemo, (Py_ssize_t)idx + 1, sizeof(Py_ssize_t)) < 0) return fail(s, "out of memory");
    return 0;
}

static int get(Scan *s, uint64_t idx) {
    if (idx >= (uint64_t)s->capmemo || !s->memo[idx]) {
        snprintf(s->err, sizeof s->err, "corrupt (memo index %llu was never set)", (unsigned long long)idx);
        return -1;
    }
    Py_ssize_t r = s->memo[idx] - 1;
    if (s->recs[r].container && s->recs[r].flags == MUT) s->recs[r].flags = FROZEN;
    return push(s, r);
}

static const char *line_end(const unsigned char *d, Py_ssize_t pos, Py_ssize_t n) {
    const void *e = memchr(d + pos, '\n', (size_t)(n - pos));
    return (const char *)e;
}

static int parse_index(const unsigned char *p, Py_ssize_t len, uint64_t *out) {
    if (len < 1 || len > 12) return -1;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

static void printable(char *dst, const unsigned char *p, Py_ssize_t len) {
    if (len > 60) len = 60;
    for (Py_ssize_t i = 0; i < len; i++) dst[i] = (p[i] >= 32 && p[i] < 127) ? (char)p[i] : '?';
    dst[len] = 0;
}

static uint64_t le(const unsigned char *p, int width) {
    uint64_t v = 0;
    for (int i = width - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static const char *refused_name(int op) {
    switch (op) {
    case 0x93: return "STACK_GLOBAL"; case 0x52: return "REDUCE"; case 0x62: return "BUILD";
    case 0x6F: return "OBJ"; case 0x81: return "NEWOBJ"; case 0x92: return "NEWOBJ_EX";
    case 0x82: return "EXT1"; case 0x83: return "EXT2"; case 0x84: return "EXT4";
    case 0x50: return "PERSID"; case 0x51: return "BINPERSID"; case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return NULL;
    }
}

static int set_memo(Scan *s, uint64_t idx) {
    Py_ssize_t old = s->capmemo;
    if (put(s, idx) < 0) return -1;
    if (s->capmemo > old) memset(s->memo + old, 0, (size_t)(s->capmemo - old) * sizeof(Py_ssize_t));
    if (!s->memo[idx]) s->nmemo++;
    s->memo[idx] = s->stack[s->sp - 1] + 1;
    return 0;
}

static int run(Scan *s, const unsigned char *d, Py_ssize_t n) {
    Py_ssize_t pos = 0, at, r;
    if (new_rec(s, 1, 0, IMM, 0) < 0) return fail(s, "out of memory"); /* record 0: a plain scalar */
    while (pos < n) {
        int op = d[pos++];
        switch (op) {
        case 0x68: /* BINGET */
            if (pos >= n) return fail(s, "truncated");
            if (get(s, d[pos]) < 0) return -1;
            pos += 1; break;
        case 0x94: /* MEMOIZE */
            if (set_memo(s, (uint64_t)s->nmemo) < 0) return -1;
            break;
        case 0x28: /* MARK */
            if (grow((void **)&s->marks, &s->capmarks, s->nmarks + 1, sizeof(Py_ssize_t)) < 0) return fail(s, "out of memory");
            s->marks[s->nmarks++] = s->sp; break;
        case 0x4B: case 0x4D: case 0x4A: case 0x47: /* BININT1, BININT2, BININT, BINFLOAT */
            pos += op == 0x4B ? 1 : op == 0x4D ? 2 : op == 0x4A ? 4 : 8;
            if (push(s, 0) < 0) return -1;
            break;
        case 0x5D: case 0x7D: case 0x8F: /* EMPTY_LIST, EMPTY_DICT, EMPTY_SET */
            if (push(s, new_rec(s, 1, 1, MUT, 1)) < 0) return -1;
            break;
        case 0x75: /* SETITEMS */
            if (pop_mark(s, &at) < 0) return -1;
            if (!at || (s->sp - at) % 2) return fail(s, "corrupt (SETITEMS)");
            if (add(s, s->stack[at - 1], at, s->sp) < 0) return -1;
            s->sp = at; break;
        case 0x61: /* APPEND */
            if (s->sp < 2) return fail(s, "corrupt (APPEND)");
            if (add(s, s->stack[s->sp - 2], s->sp - 1, s->sp) < 0) return -1;
            s->sp -= 1; break;
        case 0x65: case 0x90: /* APPENDS, ADDITEMS */
            if (pop_mark(s, &at) < 0) return -1;
            if (!at) return fail(s, "corrupt (APPENDS)");
            if (add(s, s->stack[at - 1], at, s->sp) < 0) return -1;
            s->sp = at; break;
        case 0x8C: case 0x58: case 0x8D: case 0x43: case 0x42: case 0x8E: case 0x96: case 0x55: case 0x54:
        case 0x8A: case 0x8B: { /* length-prefixed payloads */
            int width = (op == 0x8C || op == 0x43 || op == 0x55 || op == 0x8A) ? 1
                        : (op == 0x8D || op == 0x8E || op == 0x96) ? 8 : 4;
            int is_signed = op == 0x54 || op == 0x8B;
            if (pos + width > n) return fail(s, "truncated");
            uint64_t size = le(d + pos, width);
            pos += width;
            if ((is_signed && (size & 0x80000000ULL)) || size > (uint64_t)(n - pos))
                return fail(s, "truncated (a length runs past the end)");
            pos += (Py_ssize_t)size;
            if (push(s, new_rec(s, 1 + size / 8, 0, IMM, 0)) < 0) return -1;
            break;
        }
        case 0x4E: case 0x88: case 0x89: /* NONE, NEWTRUE, NEWFALSE */
            if (push(s, 0) < 0) return -1;
            break;
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            Py_ssize_t k = op - 0x84;
            if (s->sp < k) return fail(s, "corrupt (TUPLE)");
            r = build(s, s->sp - k, s->sp, IMM);
            if (r == -2) return -1;
            s->sp -= k;
            if (push(s, r) < 0) return -1;
            break;
        }
        case 0x71: /* BINPUT */
            if (pos >= n) return fail(s, "truncated");
            if (set_memo(s, d[pos]) < 0) return -1;
            pos += 1; break;
        case 0x72: /* LONG_BINPUT */
            if (pos + 4 > n) return fail(s, "truncated");
            if (set_memo(s, le(d + pos, 4)) < 0) return -1;
            pos += 4; break;
        case 0x6A: /* LONG_BINGET */
            if (pos + 4 > n) return fail(s, "truncated");
            if (get(s, le(d + pos, 4)) < 0) return -1;
            pos += 4; break;
        case 0x73: /* SETITEM */
            if (s->sp < 3) return fail(s, "corrupt (SETITEM)");
            if (add(s, s->stack[s->sp - 3], s->sp - 2, s->sp) < 0) return -1;
            s->sp -= 2; break;
        case 0x29: /* EMPTY_TUPLE */
            if (push(s, new_rec(s, 1, 1, IMM, 1)) < 0) return -1;
            break;
        case 0x74: case 0x91: case 0x6C: case 0x64: { /* TUPLE, FROZENSET, LIST, DICT */
            if (pop_mark(s, &at) < 0) return -1;
            if (op == 0x64 && (s->sp - at) % 2) return fail(s, "corrupt (DICT)");
            r = build(s, at, s->sp, (op == 0x6C || op == 0x64) ? MUT : IMM);
            if (r == -2) return -1;
            s->sp = at;
            if (push(s, r) < 0) return -1;
            break;
        }
        case 0x30: /* POP */
            if (s->nmarks && s->marks[s->nmarks - 1] == s->sp) s->nmarks--;
            else if (s->sp) s->sp--;
            else return fail(s, "corrupt (POP)");
            break;
        case 0x31: /* POP_MARK */
            if (pop_mark(s, &at) < 0) return -1;
            s->sp = at; break;
        case 0x32: /* DUP */
            if (!s->sp) return fail(s, "corrupt (DUP)");
            r = s->stack[s->sp - 1];
            if (s->recs[r].container && s->recs[r].flags == MUT) s->recs[r].flags = FROZEN;
            if (push(s, r) < 0) return -1;
            break;
        case 0x80: pos += 1; break; /* PROTO */
        case 0x95: pos += 8; break; /* FRAME */
        case 0x49: case 0x4C: case 0x46: case 0x53: case 0x56: { /* INT, LONG, FLOAT, STRING, UNICODE */
            const char *e = line_end(d, pos, n);
            if (!e) return fail(s, "truncated (a text argument has no end)");
            Py_ssize_t len = (const unsigned char *)e - (d + pos);
            pos += len + 1;
            if (push(s, new_rec(s, 1 + (uint64_t)len / 8, 0, IMM, 0)) < 0) return -1;
            break;
        }
        case 0x67: case 0x70: { /* GET, PUT */
            const char *e = line_end(d, pos, n);
            uint64_t idx;
            if (!e) return fail(s, "truncated (a text argument has no end)");
            Py_ssize_t len = (const unsigned char *)e - (d + pos);
            if (parse_index(d + pos, len, &idx) < 0) {
                char shown[64];
                printable(shown, d + pos, len > 20 ? 20 : len);
                snprintf(s->err, sizeof s->err, "bad memo index (%s)", shown);
                return -1;
            }
            pos += len + 1;
            if ((op == 0x67 ? get(s, idx) : set_memo(s, idx)) < 0) return -1;
            break;
        }
        case 0x2E: /* STOP */
            if (!s->sp) return fail(s, "corrupt (STOP on an empty stack)");
            return 0;
        case 0x63: case 0x69: { /* GLOBAL, INST */
            const char *e1 = line_end(d, pos, n);
            if (!e1) return fail(s, "truncated (a text argument has no end)");
            Py_ssize_t l1 = (const unsigned char *)e1 - (d + pos), p2 = pos + l1 + 1;
            const char *e2 = p2 <= n ? line_end(d, p2, n) : NULL;
            if (!e2) return fail(s, "truncated (a text argument has no end)");
            char mod[64], name[64];
            printable(mod, d + pos, l1);
            printable(name, d + p2, (const unsigned char *)e2 - (d + p2));
            snprintf(s->err, sizeof s->err, "refused global %s.%s", mod, name);
            return -1;
        }
        default: {
            const char *what = refused_name(op);
            if (what) snprintf(s->err, sizeof s->err, "refused opcode %s (code, not data)", what);
            else snprintf(s->err, sizeof s->err, "unknown opcode 0x%02x", op);
            return -1;
        }
        }
    }
    return fail(s, "truncated (no STOP)");
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    unsigned long long limit;
    long long max_depth;
    Py_ssize_t slack;
    if (!PyArg_ParseTuple(args, "y*KLn", &buf, &limit, &max_depth, &slack)) return NULL;
    Scan s;
    memset(&s, 0, sizeof s);
    s.limit = limit; s.max_depth = max_depth; s.slack = slack;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = run(&s, (const unsigned char *)buf.buf, buf.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    PyMem_RawFree(s.recs); PyMem_RawFree(s.stack); PyMem_RawFree(s.marks); PyMem_RawFree(s.memo);
    if (rc < 0) return PyUnicode_DecodeASCII(s.err, (Py_ssize_t)strlen(s.err), "replace");
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(data, limit, max_depth, memo_slack) -> None or the reason it is refused"},
    {NULL, NULL, 0, NULL},
};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_frscan", NULL, -1, methods};
PyMODINIT_FUNC PyInit__frscan(void) { return PyModule_Create(&module); }
