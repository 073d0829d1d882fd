/* _frdecode, part 1: the pickle machine on C nodes (with the opcode scan's bounds, in the same pass), and reading
 * the tree back (to Python objects). */
#ifndef NCCLPM_FRDECODE_TREE_H
#define NCCLPM_FRDECODE_TREE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 40       /* reading the tree back (to_py); the machine stops at SCAN_DEPTH */
#define SCAN_DEPTH 32      /* fr_scan.MAX_DEPTH */
#define MEMO_SLACK 256     /* fr_scan.MEMO_SLACK */
#define PER_BYTE 32        /* fr_scan.EXPANSION_PER_BYTE */
#define MIN_BUDGET (1 << 20) /* fr_scan.MIN_BUDGET */
#define MAX_NESTED 65536   /* fr_values.MAX_NESTED */
#define MAX_KEY_BYTES (1 << 24)
#define HOT static inline __attribute__((always_inline))
#define LIKELY(c) __builtin_expect(!!(c), 1)
#define UNLIKELY(c) __builtin_expect(!!(c), 0)

enum { T_NONE, T_TRUE, T_FALSE, T_INT, T_FLOAT, T_STR, T_LIST, T_TUPLE, T_DICT }; /* containers last (`kids`) */
enum { IMM = 0, MUT = 1, FROZEN = 2 }; /* fr_scan's flags: a list/dict is frozen once a second reference is taken */
/* 24 bytes (the machine's working set is the nodes: a dump's fit in L2-L3 at this size, not at 40).
 * INT/FLOAT: v = the value.  STR: off = offset, w = length, code = its code in the dump's strings once `columns`
 * has looked it up (-1 before; pickle memoizes strings, so most lookups are this field).  Containers: w = kid count,
 * first/last = their segments.  size: what the value expands to counting references, as fr_scan counts it (a
 * string 1 + len/8, a container 1 + its kids'); it stays below the budget, which stays below 2^32 (MAX_BYTES).
 * Node ids are int32: a dump has fewer nodes than bytes. */
typedef int32_t Id;
#define MAX_BYTES ((1 << 27) - 1) /* 128 MB: a larger dump goes to the Python path (real ones are a few MB) */
typedef struct {
    union { int64_t v; struct { int32_t off, code; }; struct { Id first, last; }; };
    int32_t w;
    uint32_t size;
    uint8_t t, ascii, depth, flags; int8_t field;
} Node;
typedef struct { int32_t start, len; Id next; } Seg; /* a run of kids in the pool */

typedef struct {
    const unsigned char *d; Py_ssize_t n;
    Node *nodes; int64_t nnode, capnode;
    Seg *segs; int64_t nseg, capseg;
    Id *pool; int64_t npool, cappool;
    Id *stack; int64_t sp, capstack;
    int64_t *marks; int64_t nmarks, capmarks;
    Id *memo; int64_t capmemo, nmemo, memo_hi; /* memo[i] = node + 1, 0 = unset; memo_hi: past the last set */
    uint64_t budget; /* fr_scan.budget_for(n): what the dump may expand to, counting references */
    int64_t visits, limit; /* kids visited while reading the tree: shared values cost each time (a bomb) */
    const char *why;
} Dec;

static int grow_slow(void **buf, int64_t *cap, int64_t need, size_t item) {
    int64_t n = *cap ? *cap : 256;
    while (n < need) n *= 2;
    if ((uint64_t)n > SIZE_MAX / item) return -1;
    void *p = PyMem_RawRealloc(*buf, (size_t)n * item);
    if (!p) return -1;
    *buf = p; *cap = n;
    return 0;
}
HOT int grow(void **buf, int64_t *cap, int64_t need, size_t item) { /* the check inline, the growing not */
    return LIKELY(need <= *cap) ? 0 : grow_slow(buf, cap, need, item);
}
#define GROW(dec, arr, cnt, cap, need) grow((void **)&(dec)->arr, &(dec)->cap, (need), sizeof(*(dec)->arr))

static int no(Dec *x, const char *why) { x->why = why; return -1; }

#define BLOCK 4096 /* opcodes read between two checks of room: each makes at most one node and one stack slot */

/* room for BLOCK more nodes and stack slots */
static int room(Dec *x) {
    if (GROW(x, nodes, nnode, capnode, x->nnode + BLOCK) < 0 || GROW(x, stack, sp, capstack, x->sp + BLOCK) < 0)
        return no(x, "out of memory");
    return 0;
}

HOT int64_t node(Dec *x, uint8_t t) { /* the caller made room */
    /* no segments (a string's code: not looked up yet), size 1, depth 0; field: not looked up */
    static const Node fresh = {.first = -1, .last = -1, .w = 0, .size = 1, .ascii = 1, .depth = 0, .flags = IMM,
                               .field = -3};
    Node *nd = &x->nodes[x->nnode];
    *nd = fresh;
    nd->t = t;
    return x->nnode++;
}


HOT int64_t fence(Dec *x) { return x->nmarks ? x->marks[x->nmarks - 1] : 0; }


/* stack[from:to] become kids of container `c` (appended as one segment), within fr_scan's bounds: the size counting
 * references and the depth, refused past the budget or SCAN_DEPTH; for a dict (`items`) every other kid is a key,
 * which must be hashable (tuples could be keys; the dump layout has none).  One pass over the kids. */
HOT int kids(Dec *x, int64_t c, int64_t from, int64_t to, int items) {
    Node *nodes = x->nodes, *nd = &nodes[c];
    int64_t k = to - from;
    if (nd->flags == FROZEN) return no(x, "a value changed after a second reference to it (a cycle?)");
    if (k > 0 && (GROW(x, pool, npool, cappool, x->npool + k) < 0 || GROW(x, segs, nseg, capseg, x->nseg + 1) < 0))
        return no(x, "out of memory");
    uint64_t size = nd->size; /* kids' sizes are < 2^32 and fewer than 2^27: no overflow */
    int depth = nd->depth, deepest = -1;
    const Id *src = x->stack + from;
    Id *dst = x->pool + x->npool;
    for (int64_t i = 0; i < k; i++) {
        Id id = src[i];
        const Node *it = &nodes[id];
        if (items && !(i & 1) && it->t >= T_LIST) return no(x, "a dict key of an unusual type"); /* list/tuple/dict */
        size += it->size;
        deepest = it->depth > deepest ? it->depth : deepest;
        dst[i] = id;
    }
    if (deepest >= depth) depth = deepest + 1;
    if (size > x->budget) return no(x, "expands too much (a reference bomb?)");
    if (depth > SCAN_DEPTH) return no(x, "nested too deep");
    nd->size = (uint32_t)size;
    nd->depth = (uint8_t)depth;
    if (k <= 0) return 0;
    x->segs[x->nseg] = (Seg){(int32_t)x->npool, (int32_t)k, -1};
    x->npool += k;
    if (nd->last >= 0) x->segs[nd->last].next = (Id)x->nseg; else nd->first = (Id)x->nseg;
    nd->last = (Id)x->nseg++;
    nd->w += (int32_t)k;
    return 0;
}

static int add_kids(Dec *x, int64_t c, int64_t from, int64_t to) { return kids(x, c, from, to, 0); }

static int dict_items(Dec *x, int64_t c, int64_t from, int64_t to) {
    if (x->nodes[c].t != T_DICT) return no(x, "items set on a non-dict");
    if ((to - from) % 2) return no(x, "odd number of dict items");
    return kids(x, c, from, to, 1);
}

/* a new container holding stack[from:to]; the caller made room for its node */
static int64_t box(Dec *x, uint8_t t, int64_t from, int64_t to) {
    int64_t c = node(x, t);
    Node *nd = &x->nodes[c];
    nd->depth = 1; nd->flags = t == T_TUPLE ? IMM : MUT;
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

HOT uint64_t le(const unsigned char *p, int w) { /* w little-endian bytes (the caller checked they are there) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t v2; uint32_t v4; uint64_t v8;
    switch (w) { /* one load each */
    case 1: return p[0];
    case 2: memcpy(&v2, p, 2); return v2;
    case 4: memcpy(&v4, p, 4); return v4;
    case 8: memcpy(&v8, p, 8); return v8;
    default: break;
    }
#endif
    uint64_t v = 0;
    for (int i = w - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* UTF-8 as pickle decodes it ('surrogatepass'); *ascii = whether every byte is < 0x80 */
static int utf8_ok(const unsigned char *s, int64_t n, uint8_t *ascii) {
    int64_t i = 0;
    *ascii = 1;
    while (i + 8 <= n) { /* ASCII 8 bytes at a time */
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ULL) break;
        i += 8;
    }
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

HOT int need(Dec *x, Py_ssize_t pos, uint64_t k) {
    if (UNLIKELY(k > (uint64_t)(x->n - pos))) return no(x, "truncated");
    return 0;
}

/* The pickle machine, on nodes; returns the root node or -1.  It keeps fr_scan's bounds as it goes (what each value
 * expands to counting references, nesting, memo indices, no change after a second reference), and reads a subset
 * of the opcodes the scan admits, each at least as strictly (the stack below a MARK is out of reach), so a dump it
 * reads is one the scan admits: tests/test_fr_native.py checks that on every input it has.  Called without the
 * GIL: it touches only `x` and the bytes.
 *
 * The hot state (the stack and its top, the nodes and their count, the memo, the innermost mark) lives in locals
 * that the compiler keeps in registers: through `x` every store to a node's int64 value could alias `x`'s counters,
 * so each opcode reloaded and stored them.  SYNC writes them back before a helper that reads `x`, RELOAD takes the
 * (possibly moved) arrays back after it. */
static int64_t run(Dec *x) {
    /* threaded dispatch (one indirect jump per handler, GCC/Clang labels as values): a switch's single jump
     * mispredicted most opcodes */
    static const void *const jump[256] = {
        [0 ... 255] = &&op_other,
        [0x80] = &&op_proto, [0x95] = &&op_frame, [0x7D] = &&op_empty_dict, [0x5D] = &&op_empty_list,
        [0x29] = &&op_empty_tuple, [0x4E] = &&op_none, [0x88] = &&op_true, [0x89] = &&op_false, [0x28] = &&op_mark,
        [0x94] = &&op_memoize, [0x71] = &&op_binput, [0x72] = &&op_long_binput, [0x68] = &&op_binget,
        [0x6A] = &&op_long_binget, [0x4B] = &&op_int1, [0x4D] = &&op_int2, [0x4A] = &&op_int, [0x8A] = &&op_int,
        [0x47] = &&op_binfloat, [0x8C] = &&op_unicode, [0x58] = &&op_unicode, [0x8D] = &&op_unicode,
        [0x85] = &&op_tuple_n, [0x86] = &&op_tuple_n, [0x87] = &&op_tuple_n, [0x74] = &&op_box, [0x6C] = &&op_box,
        [0x64] = &&op_box, [0x61] = &&op_append, [0x65] = &&op_appends, [0x73] = &&op_setitem,
        [0x75] = &&op_setitems, [0x30] = &&op_pop, [0x32] = &&op_dup, [0x2E] = &&op_stop,
    };
    static const Node fresh = {.first = -1, .last = -1, .w = 0, .size = 1, .ascii = 1, .depth = 0, .flags = IMM,
                               .field = -3}; /* as `node` makes them */
    const unsigned char *d = x->d;
    Py_ssize_t n = x->n, pos = 0, stop = 0;
    int64_t at, r;
    int op;
    if (n > MAX_BYTES) return no(x, "too big for the decoder");
    Node *nodes = x->nodes;
    Id *stack = x->stack, *memo = x->memo;
    int64_t nnode = x->nnode, sp = x->sp, nmemo = x->nmemo, memo_hi = x->memo_hi, capmemo = x->capmemo;
    int64_t fen = fence(x); /* the innermost mark: the stack below it is out of reach */
#define SYNC() do { x->nnode = nnode; x->sp = sp; x->nmemo = nmemo; x->memo_hi = memo_hi; } while (0)
#define RELOAD() do { nodes = x->nodes; stack = x->stack; memo = x->memo; capmemo = x->capmemo; fen = fence(x); } while (0)
#define NODE(t_) (nodes[nnode] = fresh, nodes[nnode].t = (t_), nnode++)
#define PUSH(id) (stack[sp++] = (Id)(id))
#define FREEZE(id) do { Node *fz_ = &nodes[id]; if (fz_->flags == MUT) fz_->flags = FROZEN; } while (0)
/* the next opcode; every BLOCK opcodes, room for BLOCK more nodes and stack slots */
#define NEXT do { \
        if (UNLIKELY(pos >= stop)) goto refill; \
        op = d[pos++]; \
        goto *jump[op]; \
    } while (0)
#define FAIL(why_) do { SYNC(); return no(x, why_); } while (0)
#define CALL(expr) do { SYNC(); if ((expr) < 0) return -1; RELOAD(); } while (0)
#define NEED(k) do { if (UNLIKELY((uint64_t)(k) > (uint64_t)(n - pos))) FAIL("truncated"); } while (0)
refill:
    if (pos >= n) FAIL("truncated");
    stop = n - pos > BLOCK ? pos + BLOCK : n;
    CALL(room(x));
    NEXT;
op_proto:
    NEED(1);
    if (d[pos] > 5) FAIL("unsupported protocol");
    pos += 1; NEXT;
op_frame:
    NEED(8);
    if (need(x, pos + 8, le(d + pos, 8)) < 0) { SYNC(); return -1; }
    pos += 8; NEXT;
op_empty_dict: op_empty_list:
    r = NODE(op == 0x7D ? T_DICT : T_LIST);
    nodes[r].depth = 1; nodes[r].flags = MUT;
    PUSH(r); NEXT;
op_empty_tuple:
    r = NODE(T_TUPLE);
    nodes[r].depth = 1;
    PUSH(r); NEXT;
op_none: r = NODE(T_NONE); PUSH(r); NEXT;
op_true: r = NODE(T_TRUE); PUSH(r); NEXT;
op_false: r = NODE(T_FALSE); PUSH(r); NEXT;
op_mark:
    if (GROW(x, marks, nmarks, capmarks, x->nmarks + 1) < 0) FAIL("out of memory");
    x->marks[x->nmarks++] = sp;
    fen = sp; NEXT;
op_memoize: at = nmemo; goto memo_put;
op_binput: NEED(1); at = d[pos]; pos += 1; goto memo_put;
op_long_binput: NEED(4); at = (int64_t)le(d + pos, 4); pos += 4; goto memo_put;
memo_put: /* the stack's top under memo index `at` */
    if (sp <= fen) FAIL("memo put on an empty stack");
    if (at > nmemo + MEMO_SLACK) FAIL("memo index far ahead");
    if (UNLIKELY(at >= capmemo)) {
        int64_t old = capmemo;
        SYNC();
        if (GROW(x, memo, nmemo, capmemo, at + 1) < 0) return no(x, "out of memory");
        RELOAD();
        memset(memo + old, 0, (size_t)(capmemo - old) * sizeof(Id));
    }
    if (!memo[at]) nmemo++;
    memo[at] = stack[sp - 1] + 1;
    if (at >= memo_hi) memo_hi = at + 1;
    NEXT;
op_binget: NEED(1); at = d[pos]; pos += 1; goto memo_get;
op_long_binget: NEED(4); at = (int64_t)le(d + pos, 4); pos += 4; goto memo_get;
memo_get: /* a second reference: a list or dict may not change any more */
    if (UNLIKELY(at >= capmemo || !memo[at])) FAIL("memo index never set");
    r = memo[at] - 1;
    FREEZE(r);
    PUSH(r);
    NEXT;
op_int1: /* BININT1 */
    NEED(1);
    r = NODE(T_INT);
    nodes[r].v = d[pos];
    pos += 1;
    PUSH(r); NEXT;
op_int2: /* BININT2 */
    NEED(2);
    r = NODE(T_INT);
    nodes[r].v = (int64_t)le(d + pos, 2);
    pos += 2;
    PUSH(r); NEXT;
op_int: { /* BININT, LONG1 */
    int w = 4;
    int64_t v;
    if (op == 0x8A) {
        NEED(1);
        w = d[pos++];
        if (w > 8) FAIL("an int past 64 bits");
    }
    NEED(w);
    uint64_t u = w ? le(d + pos, w) : 0;
    if (w && w < 8 && (u >> (8 * w - 1)) & 1) u |= ~(uint64_t)0 << (8 * w); /* signed, two's complement */
    memcpy(&v, &u, sizeof v);
    pos += w;
    r = NODE(T_INT);
    nodes[r].v = v;
    if (op == 0x8A) nodes[r].size = 1 + (uint32_t)w / 8; /* the scan counts LONG1 as 1 + len/8 */
    PUSH(r);
    NEXT;
}
op_binfloat: { /* big-endian */
    NEED(8);
    uint64_t u = 0;
    for (int i = 0; i < 8; i++) u = (u << 8) | d[pos + i];
    pos += 8;
    r = NODE(T_FLOAT);
    memcpy(&nodes[r].v, &u, sizeof u);
    PUSH(r);
    NEXT;
}
op_unicode: { /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
    int w = op == 0x8C ? 1 : op == 0x58 ? 4 : 8;
    NEED(w);
    uint64_t len = le(d + pos, w);
    pos += w;
    NEED(len);
    r = NODE(T_STR);
    Node *s = &nodes[r];
    s->off = (int32_t)pos; s->code = -1; s->w = (int32_t)len; s->size = (uint32_t)(1 + len / 8);
    if (!utf8_ok(d + pos, (int64_t)len, &s->ascii)) FAIL("a string that is not UTF-8");
    pos += (Py_ssize_t)len;
    PUSH(r);
    NEXT;
}
op_tuple_n: { /* TUPLE1..3 */
    int64_t k = op - 0x84;
    if (sp - k < fen) FAIL("stack underflow");
    SYNC();
    if ((r = box(x, T_TUPLE, sp - k, sp)) < 0) return -1;
    RELOAD();
    nnode = x->nnode;
    sp -= k;
    PUSH(r);
    NEXT;
}
op_box: /* TUPLE, LIST, DICT */
    SYNC();
    if (pop_mark(x, &at) < 0) return -1;
    if ((r = box(x, op == 0x74 ? T_TUPLE : op == 0x6C ? T_LIST : T_DICT, at, sp)) < 0) return -1;
    RELOAD();
    nnode = x->nnode;
    sp = at;
    PUSH(r);
    NEXT;
op_append:
    if (sp - 2 < fen) FAIL("stack underflow");
    if (nodes[stack[sp - 2]].t != T_LIST) FAIL("append to a non-list");
    CALL(add_kids(x, stack[sp - 2], sp - 1, sp));
    sp -= 1; NEXT;
op_appends:
    SYNC();
    if (pop_mark(x, &at) < 0) return -1;
    fen = fence(x);
    if (at - 1 < fen) FAIL("stack underflow");
    if (nodes[stack[at - 1]].t != T_LIST) FAIL("append to a non-list");
    CALL(add_kids(x, stack[at - 1], at, sp));
    sp = at; NEXT;
op_setitem:
    if (sp - 3 < fen) FAIL("stack underflow");
    CALL(dict_items(x, stack[sp - 3], sp - 2, sp));
    sp -= 2; NEXT;
op_setitems:
    SYNC();
    if (pop_mark(x, &at) < 0) return -1;
    fen = fence(x);
    if (at - 1 < fen) FAIL("stack underflow");
    CALL(dict_items(x, stack[at - 1], at, sp));
    sp = at; NEXT;
op_pop:
    if (x->nmarks && fen == sp) { x->nmarks--; fen = fence(x); }
    else if (sp > fen) sp--;
    else FAIL("stack underflow");
    NEXT;
op_dup:
    if (sp <= fen) FAIL("stack underflow");
    FREEZE(stack[sp - 1]);
    r = stack[sp - 1];
    PUSH(r);
    NEXT;
op_stop:
    if (sp <= fen) FAIL("stack underflow");
    SYNC();
    return stack[sp - 1];
op_other:
    FAIL("an opcode the dump layout does not use");
#undef NEXT
#undef SYNC
#undef RELOAD
#undef NODE
#undef PUSH
#undef FREEZE
#undef FAIL
#undef CALL
#undef NEED
}

/* ---- reading the tree ---------------------------------------------------------------------------------- */

typedef struct { int64_t seg, i; } Iter; /* walks a container's kids */
HOT void iter(Dec *x, int64_t c, Iter *it) { it->seg = x->nodes[c].first; it->i = 0; }
HOT int64_t next_kid(Dec *x, Iter *it) {
    while (it->seg >= 0 && it->i >= x->segs[it->seg].len) { it->seg = x->segs[it->seg].next; it->i = 0; }
    if (it->seg < 0) return -1;
    if (UNLIKELY(++x->visits > x->limit)) { x->why = "expands too much (a reference bomb?)"; it->seg = -1; return -1; }
    return x->pool[x->segs[it->seg].start + it->i++];
}

HOT int str_is(Dec *x, int64_t k, const char *lit) {
    Node *s = &x->nodes[k];
    size_t len = strlen(lit);
    return s->t == T_STR && (size_t)s->w == len && memcmp(x->d + s->off, lit, len) == 0;
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
    case T_STR: return PyUnicode_DecodeUTF8((const char *)x->d + nd->off, nd->w, "surrogatepass");
    default: return to_py_box(x, k, depth);
    }
}

#endif
