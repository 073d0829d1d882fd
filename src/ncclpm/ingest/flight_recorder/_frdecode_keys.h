/* _frdecode, part 2: dictionaries of byte strings and the repr keys of nested values. */
#ifndef NCCLPM_FRDECODE_KEYS_H
#define NCCLPM_FRDECODE_KEYS_H
#include "_frdecode_tree.h"

/* ---- byte-string dictionaries (distinct strings, distinct nested keys) ---------------------------------- */

typedef struct {
    char *arena; int64_t narena, caparena;
    int64_t *off, *len; int64_t count, capoff, caplen;
    int64_t *node; int64_t capnode; /* one node holding the value (for nested values) */
    int64_t *slots; int64_t nslots; /* index + 1, 0 = empty */
} Dict;

/* seeded once per process (module init): keys come from the dump, and a fixed hash would let a hostile dump
 * choose strings that all fall in one slot (quadratic probing) */
static uint64_t hash_seed = 0x9E3779B97F4A7C15ULL;

static uint64_t hash_bytes(const char *p, int64_t n) { /* 8 bytes a step, then murmur3's finaliser */
    uint64_t h = hash_seed ^ ((uint64_t)n * 0xC2B2AE3D27D4EB4FULL), w;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001B3ULL;
        h ^= h >> 29;
    }
    w = 0;
    if (n >= 8 && i < n) memcpy(&w, p + n - 8, 8); /* the last 8 bytes (overlapping): no variable-size copy */
    else for (int64_t k = n - 1; k >= i; k--) w = (w << 8) | (unsigned char)p[k];
    h = (h ^ w) * 0x100000001B3ULL;
    h ^= h >> 33; h *= 0xFF51AFD7ED558CCDULL; h ^= h >> 33; h *= 0xC4CEB9FE1A85EC53ULL; h ^= h >> 33;
    return h;
}

static void dict_free(Dict *t) {
    PyMem_RawFree(t->arena); PyMem_RawFree(t->off); PyMem_RawFree(t->len); PyMem_RawFree(t->node);
    PyMem_RawFree(t->slots);
}

/* the code of bytes p[0:n], or -1 when the dictionary does not hold them */
static int64_t dict_find(const Dict *t, const char *p, int64_t n) {
    if (!t->nslots) return -1;
    uint64_t h = hash_bytes(p, n) & (uint64_t)(t->nslots - 1);
    while (t->slots[h]) {
        int64_t i = t->slots[h] - 1;
        if (t->len[i] == n && memcmp(t->arena + t->off[i], p, (size_t)n) == 0) return i;
        h = (h + 1) & (uint64_t)(t->nslots - 1);
    }
    return -1;
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

HOT int put(Buf *b, const char *s, int64_t n) {
    if (UNLIKELY(b->n + n > b->cap)) {
        if (b->n + n > MAX_KEY_BYTES) return -1;
        if (grow((void **)&b->b, &b->cap, b->n + n, 1) < 0) return -1;
    }
    for (int64_t i = 0; i < n; i++) b->b[b->n + i] = s[i]; /* a few bytes: no memcpy call */
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
    const unsigned char *p = x->d + s->off;
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

/* ---- a dump's cache of its nested values, by structure (sizes and dtypes: one of each per entry) ----------------
 * Building a value's repr (digits, quotes) and hashing it was ~14 % of decoding.  A value whose structure (container
 * types and lengths, ints, string bytes) equals one already read has the same repr, so its code is found by a hash
 * of the nodes and a walk comparing them; only a value not seen in this dump gets its repr.  The cache holds only
 * values whose repr was read, so a value of a shape `repr_nested` refuses never hits it. */

typedef struct { uint64_t h; int64_t node, code; } CSlot; /* code -1: an empty slot */
typedef struct { CSlot *s; int64_t n, count; } NCache;

HOT uint64_t mix(uint64_t h, uint64_t v) { h = (h ^ v) * 0x100000001B3ULL; return h ^ (h >> 29); }

/* a hash of the value's structure, for the shapes `repr_nested` reads of sizes (lists of int lists) and dtypes (lists
 * of strings); -1 for another shape or past the visits' limit (the repr path then says why) */
static int shape_hash(Dec *x, int64_t k, int kind, uint64_t *out) {
    const Node *nd = &x->nodes[k];
    if ((nd->t != T_LIST && nd->t != T_TUPLE) || nd->w > MAX_NESTED) return -1;
    uint64_t h = mix(hash_seed, (uint64_t)nd->t << 32 | (uint32_t)nd->w);
    Iter it;
    int64_t c;
    iter(x, k, &it);
    while ((c = next_kid(x, &it)) >= 0) {
        const Node *cn = &x->nodes[c];
        if (kind == K_DTYPES) {
            if (cn->t != T_STR) return -1;
            h = mix(h, hash_bytes((const char *)x->d + cn->off, cn->w));
            continue;
        }
        if (cn->t != T_LIST && cn->t != T_TUPLE) return -1;
        h = mix(h, (uint64_t)cn->t << 32 | (uint32_t)cn->w);
        Iter jt;
        int64_t e;
        iter(x, c, &jt);
        while ((e = next_kid(x, &jt)) >= 0) {
            if (x->nodes[e].t != T_INT) return -1;
            h = mix(h, (uint64_t)x->nodes[e].v);
        }
    }
    if (x->why) return -1;
    h ^= h >> 33; h *= 0xFF51AFD7ED558CCDULL; h ^= h >> 33;
    *out = h;
    return 0;
}

/* whether two values of the shapes `shape_hash` reads have the same structure (so the same repr): container types
 * and lengths, ints, string bytes (one loop, no recursion: a sizes list's dims are one level down) */
static int same_value(Dec *x, int64_t a, int64_t b, int kind) {
    const Node *p = &x->nodes[a], *q = &x->nodes[b];
    if (a == b) return 1;
    if (p->t != q->t || p->w != q->w) return 0;
    Iter i, j;
    int64_t u, v;
    iter(x, a, &i);
    iter(x, b, &j);
    while ((u = next_kid(x, &i)) >= 0) {
        if ((v = next_kid(x, &j)) < 0) return 0;
        if (u == v) continue; /* a memoized value, shared */
        const Node *pu = &x->nodes[u], *qv = &x->nodes[v];
        if (pu->t != qv->t || pu->w != qv->w) return 0;
        if (kind == K_DTYPES) {
            if (pu->t != T_STR || memcmp(x->d + pu->off, x->d + qv->off, (size_t)pu->w) != 0) return 0;
            continue;
        }
        if (pu->t != T_LIST && pu->t != T_TUPLE) return 0;
        Iter i2, j2;
        int64_t e, f;
        iter(x, u, &i2);
        iter(x, v, &j2);
        while ((e = next_kid(x, &i2)) >= 0) {
            if ((f = next_kid(x, &j2)) < 0) return 0;
            const Node *pe = &x->nodes[e], *qf = &x->nodes[f];
            if (pe->t != T_INT || qf->t != T_INT || pe->v != qf->v) return 0;
        }
    }
    return !x->why;
}

static void ncache_free(NCache *c) { PyMem_RawFree(c->s); memset(c, 0, sizeof *c); }

/* the code of a value equal to `k` (hash h) read before in this dump, or -1 */
static int64_t ncache_find(Dec *x, const NCache *c, uint64_t h, int64_t k, int kind) {
    if (!c->n) return -1;
    for (uint64_t i = h & (uint64_t)(c->n - 1);; i = (i + 1) & (uint64_t)(c->n - 1)) {
        const CSlot *sl = &c->s[i];
        if (sl->code < 0) return -1;
        if (sl->h == h && same_value(x, sl->node, k, kind)) return sl->code;
    }
}

/* remember `k` (hash h) has `code`; -1 on out of memory */
static int ncache_put(NCache *c, uint64_t h, int64_t k, int64_t code) {
    if ((c->count + 1) * 2 > c->n) {
        int64_t n = c->n ? c->n * 2 : 64;
        CSlot *s = PyMem_RawMalloc((size_t)n * sizeof(CSlot));
        if (!s) return -1;
        for (int64_t i = 0; i < n; i++) s[i].code = -1;
        for (int64_t i = 0; i < c->n; i++) {
            if (c->s[i].code < 0) continue;
            uint64_t j = c->s[i].h & (uint64_t)(n - 1);
            while (s[j].code >= 0) j = (j + 1) & (uint64_t)(n - 1);
            s[j] = c->s[i];
        }
        PyMem_RawFree(c->s);
        c->s = s; c->n = n;
    }
    uint64_t j = h & (uint64_t)(c->n - 1);
    while (c->s[j].code >= 0) j = (j + 1) & (uint64_t)(c->n - 1);
    c->s[j] = (CSlot){h, k, code};
    c->count++;
    return 0;
}

#endif
