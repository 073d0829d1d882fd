/* The text path in C, optional (built by hatch_build.py when a C compiler is present; the Python code does the same
 * work without it):
 *
 * Matcher(anchors): the anchors (non-empty str without a newline) compiled for scan_cut (a shift-or filter over 8
 *   buckets of literals: see the Matcher's comment).
 * scan_cut(matcher, texts, first_lines, whole, following) -> (text, line, hit, raw, slow)
 *   Finds the lines holding an anchor in a group of texts - the lines extract_all of
 *   ncclpm.ingest.rawscan.hit_line_regex gives, the reference - and cuts them (and the lines around them) out: what
 *   ncclpm.ingest.rawscan.cut_rows does in Python (the rules are explained there), without the GIL, so that the
 *   scan threads run in parallel.
 *   texts: bytes-like (valid UTF-8); first_lines: line number of each text's first line; whole: read as Python
 *   splits lines (also: the line before each hit is cut out, and an anchor cut by a newline where the regex's
 *   match would hold it sends the text to the slow path); following: also the line after each hit.
 *   Returns the rows as arrays (text: uint32, line: int64, hit: uint8, as bytes), their texts joined by "\n"
 *   (a row never holds one) and the indices of the texts sent to the slow path.
 *
 * utf8(texts) -> bool: whether every text (bytes-like) is valid UTF-8, checked without the GIL.
 * newlines(data, start, end) -> int: how many newlines data[start:end] holds (bytes-like; SSE2, without the GIL).
 *
 * Block(capacity): a group's texts read (or copied) one after the other into one block of memory, which polars
 *   imports without a copy (`__arrow_c_array__`: a large_binary array, one value per text) and the cutter reads
 *   (buffer protocol). Blocks are kept for reuse when freed (at most POOL_MAX): fresh memory costs a page fault
 *   per 4 kB, which was most of the cost of reading the files (0.5 of 0.7 s CPU on 1 GB). `trim()` frees them,
 *   and the blocks still in use as they are freed (the last groups' scans), until a block is made again.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint32_t *text; int64_t *line; uint8_t *hit; const char **p; Py_ssize_t *n;
    Py_ssize_t len, cap, bytes;
} Rows;

static int emit(Rows *r, uint32_t text, int64_t line, const char *p, Py_ssize_t n, uint8_t hit) {
    if (r->len == r->cap) {
        Py_ssize_t cap = r->cap ? 2 * r->cap : 1024;
        void *a = PyMem_RawRealloc(r->text, cap * sizeof *r->text);
        if (a) r->text = a;
        void *b = a ? PyMem_RawRealloc(r->line, cap * sizeof *r->line) : NULL;
        if (b) r->line = b;
        void *c = b ? PyMem_RawRealloc(r->hit, cap * sizeof *r->hit) : NULL;
        if (c) r->hit = c;
        void *d = c ? PyMem_RawRealloc((void *)r->p, cap * sizeof *r->p) : NULL;
        if (d) r->p = d;
        void *e = d ? PyMem_RawRealloc(r->n, cap * sizeof *r->n) : NULL;
        if (!e) return -1;
        r->n = e;
        r->cap = cap;
    }
    r->text[r->len] = text; r->line[r->len] = line; r->hit[r->len] = hit; r->p[r->len] = p; r->n[r->len] = n;
    r->len++;
    r->bytes += n + 1;
    return 0;
}

/* Newlines in [p, end). With SSE2 (every x86-64): 16 bytes at a time, the matches (0xff) subtracted from byte
 * counters, which are summed by `psadbw` before they can wrap (255 rounds). Elsewhere: eight bytes at a time, a
 * byte of x is zero exactly where the high bit of t is clear; the ones are summed per byte lane likewise. */
#if defined(__SSE2__)
#include <emmintrin.h>
static Py_ssize_t count_nl(const char *p, const char *end) {
    const __m128i nl = _mm_set1_epi8('\n'), zero = _mm_setzero_si128();
    Py_ssize_t k = 0;
    while (end - p >= 16) {
        __m128i acc = zero;
        for (int i = 0; i < 255 && end - p >= 16; i++, p += 16)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), nl));
        __m128i sums = _mm_sad_epu8(acc, zero);
        k += (Py_ssize_t)(_mm_cvtsi128_si32(sums) + _mm_extract_epi16(sums, 4));
    }
    for (; p < end; p++) k += *p == '\n';
    return k;
}
#else
static Py_ssize_t count_nl(const char *p, const char *end) {
    const uint64_t low7 = 0x7f7f7f7f7f7f7f7fULL, ones = 0x0101010101010101ULL, nl = 0x0a0a0a0a0a0a0a0aULL;
    Py_ssize_t k = 0;
    while (end - p >= 8) {
        uint64_t lanes = 0;
        for (int i = 0; i < 255 && end - p >= 8; i++, p += 8) {
            uint64_t w, x, t;
            memcpy(&w, p, 8);
            x = w ^ nl;
            t = ((x & low7) + low7) | x;
            lanes += (~t >> 7) & ones;
        }
        lanes = (lanes & 0x00ff00ff00ff00ffULL) + ((lanes >> 8) & 0x00ff00ff00ff00ffULL); /* 4 lanes <= 510 */
        k += (Py_ssize_t)((lanes * 0x0001000100010001ULL) >> 48);
    }
    for (; p < end; p++) k += *p == '\n';
    return k;
}
#endif

/* A line as polars reads it: one trailing carriage return dropped. */
static Py_ssize_t polars_len(const char *p, Py_ssize_t n) { return n > 0 && p[n - 1] == '\r' ? n - 1 : n; }

typedef struct { const char *data; Py_ssize_t size; int64_t first; int whole; Py_ssize_t h0, nh; } Text;

/* One text's rows (rawscan.cut_rows, line for line), its hit lines at `at` (start offsets, in order, one per line)
 * of `len` bytes. -1: out of memory. */
static int cut_text(Rows *r, uint32_t index, const Text *t, const Py_ssize_t *at_, const Py_ssize_t *len_,
                    Py_ssize_t nh, int following) {
    const char *data = t->data;
    Py_ssize_t size = t->size, pos = 0;
    int64_t number = t->first, last = t->first - 1;
    int py = t->whole;
    for (Py_ssize_t k = 0; k < nh; k++) {
        Py_ssize_t at = at_[k], len = len_[k], end = at + len;
        const char *found = data + at;
        number += count_nl(data + pos, found);
        if (t->whole && at > 0 && number - 1 > last) { /* the line before */
            const char *stop = data + at - 1, *s = stop;
            while (s > data && s[-1] != '\n') s--;
            if (emit(r, index, number - 1, s, stop - s, 0) < 0) return -1;
        }
        if (number == last) /* already there as the line after the previous hit */
            r->hit[r->len - 1] = 1;
        else if (emit(r, index, number, found, py ? len : polars_len(found, len), 1) < 0)
            return -1;
        last = number;
        if (following && end < size && (py || end + 1 < size)) { /* the line after */
            const char *s = data + end + 1, *nl = memchr(s, '\n', (size_t)(size - end - 1));
            Py_ssize_t n = (nl ? nl : data + size) - s;
            if (emit(r, index, number + 1, s, py ? n : polars_len(s, n), 0) < 0) return -1;
            last = number + 1;
        }
        pos = end;
    }
    return 0;
}

/* ---- Matcher: every occurrence of many literals, found with a shift-or filter over 8 buckets ---- */

/* The anchors are put in 8 buckets by length (the short ones apart: a bucket is only as selective as its shortest
 * literal). For each bucket and each distance d (0..7) from a literal's last byte, mask[sc] has the bucket's bit
 * cleared when some literal of the bucket has, d bytes before its end, the "super-character" sc: that byte's low 4
 * bits and the byte before it (12 bits, a 32 kB table; a literal's first byte takes any byte before it, and a
 * distance past a literal's length takes anything; the low half of the byte, not the high half of the one before:
 * ~6x fewer candidates in NCCL's lines). Shifting the state one byte per input byte and or-ing in
 * mask[sc] leaves, in the top byte, a clear bit for each bucket one of whose literals may end there (last 8 bytes):
 * only those candidates are compared with the bucket's literals. One table load and a shift per byte: ~3x the
 * rate of the regex engine's lazy DFA over the same ~340 anchors, which most of the text's CPU went to. */

#define SC_BITS 12
#define BUCKETS 8
/* A candidate is compared only with the literals of its bucket whose last bytes (up to 4: `tail`) it ends in,
 * found by hashing them (HASH_BITS): by their last byte alone, the 8-byte-or-longer buckets' candidates were
 * compared with ~50 literals each (most of the matcher's time with ~1,000 anchors). */
#define HASH_BITS 13
#define TAIL_MAX 4

typedef struct {
    PyObject_HEAD
    uint64_t mask[1 << SC_BITS];
    uint64_t reset;   /* the state after a byte no literal holds (a newline): only the distances past the bucket's
                         shortest literal are open */
    char *store;      /* the literals' bytes, bucket after bucket */
    Py_ssize_t *off, *len;
    Py_ssize_t start[BUCKETS + 1]; /* literals of bucket b: start[b] .. start[b + 1] */
    Py_ssize_t n;
    uint32_t *order;                     /* the literals by bucket, then by last byte ... */
    uint32_t by_last[BUCKETS][257];      /* ... those of bucket b ending in byte c: by_last[b][c] .. [b][c + 1] */
    int tail[BUCKETS];                   /* the last bytes of a bucket's literals its candidates are hashed on */
    uint32_t *hashed;                    /* the literals by hash of (bucket, last tail[b] bytes) ... */
    uint32_t hash_at[(1 << HASH_BITS) + 1]; /* ... those of hash h: hash_at[h] .. hash_at[h + 1] */
    unsigned short_buckets;              /* the buckets whose shortest literal has fewer than TAIL_MAX bytes */
    uint8_t tail4[1 << 13];              /* a bit per tail4_hash of the last 4 bytes of every other literal */
    unsigned long_buckets;               /* the buckets whose shortest literal has 8 bytes or more ... */
    uint8_t tail8[1 << 13];              /* ... and a bit per tail8_hash of the last 8 bytes of each of their literals */
} Matcher;

/* The byte before and the low 4 bits of a byte (in ASCII text the low half of a byte tells more than the high
 * half: 16 letters or digits share one high half): as the 16 bits at data[p - 1], little-endian, masked. */
static unsigned sc_of(unsigned byte, unsigned before) { return ((byte & 15) << 8) | before; }
/* sc_of(u[p], u[p - 1]) (one load and a mask where that is the byte order) */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline unsigned sc_at(const unsigned char *u, Py_ssize_t p) {
    uint16_t w;
    memcpy(&w, u + p - 1, 2);
    return (unsigned)w & 0xfffu;
}
#else
static inline unsigned sc_at(const unsigned char *u, Py_ssize_t p) { return sc_of(u[p], u[p - 1]); }
#endif
#define SC_AT(u, p) sc_at((u), (p))

/* The expected cost of a bucket of `c` literals, the shortest `len` bytes long (see matcher_init). */
static double group_cost(double c, Py_ssize_t len) {
    double pass = c / 512.0 < 1.0 ? c / 512.0 : 1.0, cost = c;
    for (Py_ssize_t d = 0; d < len && d < 8; d++) cost *= pass;
    return cost;
}

/* The last `k` bytes ending at u[p] (p + 1 >= k), and their hash in bucket b. */
static inline uint32_t tail_key(const unsigned char *u, Py_ssize_t p, int k) {
    uint32_t key = 0;
    for (int j = k - 1; j >= 0; j--) key = (key << 8) | u[p - j];
    return key;
}
static inline unsigned tail_hash(uint32_t key, int b) {
    return (unsigned)((((uint64_t)b << 32) | key) * 0x9E3779B97F4A7C15ULL >> (64 - HASH_BITS));
}

/* 16 bits of the 4 bytes ending at u[p] (p >= 3), as one little- or big-endian load: the same for text and
 * literals. Most candidates of the filter end in 4 bytes no literal ends in: this one bit spares their lookup. */
static inline unsigned tail4_hash(const unsigned char *u, Py_ssize_t p) {
    uint32_t w;
    memcpy(&w, u + p - 3, 4);
    return (unsigned)((w * 0x9E3779B1u) >> 16);
}

/* 16 bits of the 8 bytes ending at u[p] (p >= 7): a candidate of the long literals' buckets only (one in NCCL's
 * lines, e.g. "NCCL" ending "[0] NCCL INFO" as it ends "with NCCL") is dropped unless some literal ends so. */
static inline unsigned tail8_hash(const unsigned char *u, Py_ssize_t p) {
    uint64_t w;
    memcpy(&w, u + p - 7, 8);
    return (unsigned)((w * 0x9E3779B97F4A7C15ULL) >> 48);
}

/* Whether one of the k <= 4 bytes ending at u[p] (p + 1 >= k) may be a newline, in one load where p >= 3: every
 * zero byte of w ^ "\n\n\n\n" is flagged by the borrow trick (a byte above a zero one may be flagged too: then
 * the caller only takes the slower, exact way). */
static inline int newline_in_tail(const unsigned char *u, Py_ssize_t p, int k) {
    if (p < 3) return memchr(u + p + 1 - k, '\n', (size_t)k) != NULL;
    uint32_t w;
    memcpy(&w, u + p - 3, 4);
    w ^= 0x0a0a0a0aU;
    uint32_t flags = (w - 0x01010101U) & ~w & 0x80808080U;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint32_t tail = k >= 4 ? 0xffffffffU : (1U << (8 * k)) - 1; /* u[p] is the lowest byte */
#else
    uint32_t tail = k >= 4 ? 0xffffffffU : ~((1U << (8 * (4 - k))) - 1); /* u[p] is the highest byte */
#endif
    return (flags & tail) != 0;
}

static void matcher_dealloc(Matcher *m) {
    PyMem_Free(m->store);
    PyMem_Free(m->off);
    PyMem_Free(m->len);
    PyMem_Free(m->order);
    PyMem_Free(m->hashed);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

typedef struct { const char *p; Py_ssize_t n; } Lit;

/* By length (8 bytes or more: alike), then by their last bytes, backwards: the literals of a bucket share their
 * last bytes as much as they can, so that fewer super-characters are open at each distance. */
static int by_length(const void *a, const void *b) {
    const Lit *x = a, *y = b;
    Py_ssize_t lx = x->n < 8 ? x->n : 8, ly = y->n < 8 ? y->n : 8;
    if (lx != ly) return (lx > ly) - (lx < ly);
    for (Py_ssize_t i = 1; i <= lx; i++) {
        unsigned char cx = (unsigned char)x->p[x->n - i], cy = (unsigned char)y->p[y->n - i];
        if (cx != cy) return (cx > cy) - (cx < cy);
    }
    return (x->n > y->n) - (x->n < y->n);
}

/* Matcher(anchors: list of non-empty str without a newline). */
static int matcher_init(Matcher *m, PyObject *args, PyObject *kw) {
    PyObject *list;
    if (m->store) { PyErr_SetString(PyExc_TypeError, "Matcher: already initialised"); return -1; }
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list)) return -1;
    Py_ssize_t n = PyList_GET_SIZE(list), total = 0;
    if (n == 0) { PyErr_SetString(PyExc_ValueError, "Matcher: no anchor"); return -1; }
    Lit *lits = PyMem_Calloc((size_t)n, sizeof *lits);
    if (!lits) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(list, i);
        if (!PyUnicode_Check(s)) { PyErr_SetString(PyExc_TypeError, "Matcher: anchors are str"); goto fail; }
        if (!(lits[i].p = PyUnicode_AsUTF8AndSize(s, &lits[i].n))) goto fail;
        if (lits[i].n == 0 || memchr(lits[i].p, '\n', (size_t)lits[i].n)) {
            PyErr_SetString(PyExc_ValueError, "Matcher: an anchor is empty or holds a newline");
            goto fail;
        }
        total += lits[i].n;
    }
    qsort(lits, (size_t)n, sizeof *lits, by_length);
    m->store = PyMem_Malloc((size_t)total);
    m->off = PyMem_Calloc((size_t)n, sizeof *m->off);
    m->len = PyMem_Calloc((size_t)n, sizeof *m->len);
    if (!m->store || !m->off || !m->len) { PyErr_NoMemory(); goto fail; }
    m->n = n;
    /* Buckets: contiguous runs of the literals sorted by length, chosen to keep the expected candidates few: a bucket
     * of c literals whose shortest has S bytes (8 at most) lets through about (c / 512)^S of the text's bytes
     * (each distance's super-character among ~c of 4096, in text where a few hundred are common), and each
     * candidate is compared with its c literals. The short ones by dynamic programming; the 8-byte-or-longer
     * ones (all S = 8) evenly, in however many buckets are left. */
    Py_ssize_t shortn = 0;
    while (shortn < n && lits[shortn].n < 8) shortn++;
    double *best = PyMem_Calloc((size_t)(BUCKETS + 1) * (size_t)(shortn + 1), sizeof *best);
    Py_ssize_t *cut = PyMem_Calloc((size_t)(BUCKETS + 1) * (size_t)(shortn + 1), sizeof *cut);
    if (!best || !cut) { PyMem_Free(best); PyMem_Free(cut); PyErr_NoMemory(); goto fail; }
#define AT(k, j) ((size_t)(k) * (size_t)(shortn + 1) + (size_t)(j))
    for (Py_ssize_t j = 1; j <= shortn; j++) best[AT(0, j)] = HUGE_VAL;
    for (int k = 1; k <= BUCKETS; k++)
        for (Py_ssize_t j = 0; j <= shortn; j++) {
            best[AT(k, j)] = best[AT(k - 1, j)]; /* a bucket left empty */
            cut[AT(k, j)] = j;
            for (Py_ssize_t i = 0; i < j; i++) {
                double c = (double)(j - i), cost = best[AT(k - 1, i)] + group_cost(c, lits[i].n);
                if (cost < best[AT(k, j)]) { best[AT(k, j)] = cost; cut[AT(k, j)] = i; }
            }
        }
    Py_ssize_t longn = n - shortn;
    int kshort = BUCKETS;
    double least = HUGE_VAL;
    for (int k = 0; k <= BUCKETS; k++) { /* k buckets for the short ones, the rest for the long ones */
        int kl = BUCKETS - k;
        if ((longn && !kl) || (shortn && !k)) continue;
        double cost = best[AT(k, shortn)];
        for (int q = 0; q < kl; q++) {
            Py_ssize_t lo = longn * q / kl, hi = longn * (q + 1) / kl;
            if (hi > lo) cost += group_cost((double)(hi - lo), 8);
        }
        if (cost < least) { least = cost; kshort = k; }
    }
    Py_ssize_t bounds[BUCKETS + 1];
    int nb = 0;
    for (Py_ssize_t j = shortn, k = kshort; k > 0 && j > 0; k--) { /* the short buckets' bounds, backwards */
        Py_ssize_t i = cut[AT(k, j)];
        if (i < j) bounds[nb++] = i;
        j = i;
    }
    PyMem_Free(best);
    PyMem_Free(cut);
#undef AT
    int b = 0;
    m->start[0] = 0;
    while (nb > 1) m->start[++b] = bounds[--nb - 1]; /* bounds[nb - 1] is 0 */
    if (shortn) m->start[++b] = shortn;
    int kl = BUCKETS - b;
    for (int q = 0; longn && q < kl; q++) m->start[++b] = shortn + longn * (q + 1) / kl;
    for (; b < BUCKETS; b++) m->start[b + 1] = n;
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(m->store + pos, lits[i].p, (size_t)lits[i].n);
        m->off[i] = pos;
        m->len[i] = lits[i].n;
        pos += lits[i].n;
    }
    /* The masks: all set, then each literal's bytes cleared, and every super-character at distances past a
     * bucket's shortest literal. */
    memset(m->mask, 0xff, sizeof m->mask);
    m->reset = ~0ULL;
    for (b = 0; b < BUCKETS; b++) {
        if (m->start[b] == m->start[b + 1]) continue; /* an empty bucket never matches */
        Py_ssize_t shortest = m->len[m->start[b]];
        for (Py_ssize_t d = shortest; d < 8; d++) {
            uint64_t bit = 1ULL << (8 * (7 - d) + b);
            for (unsigned v = 0; v < (1u << SC_BITS); v++) m->mask[v] &= ~bit;
        }
        for (Py_ssize_t d = 1; d < 8; d++) /* d bytes after the newline: open where a literal fits after it */
            if (d >= shortest) m->reset &= ~(1ULL << (8 * (7 - d) + b));
        for (Py_ssize_t i = m->start[b]; i < m->start[b + 1]; i++) {
            const unsigned char *lit = (const unsigned char *)m->store + m->off[i];
            Py_ssize_t len = m->len[i];
            for (Py_ssize_t d = 0; d < 8 && d < len; d++) {
                uint64_t bit = 1ULL << (8 * (7 - d) + b);
                Py_ssize_t at = len - 1 - d;
                if (at == 0)
                    for (unsigned any = 0; any < 256; any++) m->mask[sc_of(lit[0], any)] &= ~bit;
                else
                    m->mask[sc_of(lit[at], lit[at - 1])] &= ~bit;
            }
        }
    }
    /* a candidate is compared with the literals of its bucket that end in its byte only */
    if (!(m->order = PyMem_Calloc((size_t)n, sizeof *m->order))) { PyErr_NoMemory(); goto fail; }
    Py_ssize_t k = 0;
    for (b = 0; b < BUCKETS; b++)
        for (unsigned c = 0; c < 256; c++) {
            m->by_last[b][c] = (uint32_t)k;
            for (Py_ssize_t i = m->start[b]; i < m->start[b + 1]; i++)
                if ((unsigned char)m->store[m->off[i] + m->len[i] - 1] == c) m->order[k++] = (uint32_t)i;
            m->by_last[b][256] = (uint32_t)k;
        }
    /* ... and, faster, with those whose last tail[b] bytes it ends in (a bucket's shortest literal's length, at most
     * TAIL_MAX): a table of the literals by the hash of (bucket, those bytes) */
    if (!(m->hashed = PyMem_Calloc((size_t)n, sizeof *m->hashed))) { PyErr_NoMemory(); goto fail; }
    memset(m->hash_at, 0, sizeof m->hash_at);
    for (b = 0; b < BUCKETS; b++) {
        Py_ssize_t shortest = m->start[b] < m->start[b + 1] ? m->len[m->start[b]] : TAIL_MAX;
        m->tail[b] = (int)(shortest < TAIL_MAX ? shortest : TAIL_MAX);
        for (Py_ssize_t i = m->start[b]; i < m->start[b + 1]; i++) {
            const unsigned char *lit = (const unsigned char *)m->store + m->off[i];
            m->hash_at[tail_hash(tail_key(lit, m->len[i] - 1, m->tail[b]), b) + 1]++;
        }
    }
    for (unsigned h = 0; h < (1u << HASH_BITS); h++) m->hash_at[h + 1] += m->hash_at[h];
    memset(m->tail4, 0, sizeof m->tail4);
    memset(m->tail8, 0, sizeof m->tail8);
    m->short_buckets = m->long_buckets = 0;
    for (b = 0; b < BUCKETS; b++) {
        if (m->start[b] == m->start[b + 1] || m->len[m->start[b]] < 8) continue;
        m->long_buckets |= 1u << b;
        for (Py_ssize_t i = m->start[b]; i < m->start[b + 1]; i++) {
            unsigned h = tail8_hash((const unsigned char *)m->store + m->off[i], m->len[i] - 1);
            m->tail8[h >> 3] |= (uint8_t)(1u << (h & 7));
        }
    }
    for (b = 0; b < BUCKETS; b++) {
        if (m->tail[b] < TAIL_MAX) m->short_buckets |= 1u << b;
        else
            for (Py_ssize_t i = m->start[b]; i < m->start[b + 1]; i++) {
                unsigned h = tail4_hash((const unsigned char *)m->store + m->off[i], m->len[i] - 1);
                m->tail4[h >> 3] |= (uint8_t)(1u << (h & 7));
            }
    }
    {
        uint32_t *fill = PyMem_Calloc((size_t)1 << HASH_BITS, sizeof *fill);
        if (!fill) { PyErr_NoMemory(); goto fail; }
        for (b = 0; b < BUCKETS; b++)
            for (Py_ssize_t i = m->start[b]; i < m->start[b + 1]; i++) {
                const unsigned char *lit = (const unsigned char *)m->store + m->off[i];
                unsigned h = tail_hash(tail_key(lit, m->len[i] - 1, m->tail[b]), b);
                m->hashed[m->hash_at[h] + fill[h]++] = (uint32_t)i;
            }
        PyMem_Free(fill);
    }
    PyMem_Free(lits);
    return 0;
fail:
    PyMem_Free(lits);
    return -1;
}

static PyTypeObject MatcherType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ncclpm.ingest._textcut.Matcher",
    .tp_basicsize = sizeof(Matcher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Anchors compiled for scan_cut (see the module's comment).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)matcher_init,
    .tp_dealloc = (destructor)matcher_dealloc,
};

/* Whether some literal lies wholly in u[lo, hi) (no newline in between: plain). */
static int any_within(const Matcher *m, const unsigned char *u, Py_ssize_t lo, Py_ssize_t hi) {
    uint64_t st = m->reset;
    unsigned before = '\n';
    for (Py_ssize_t p = lo; p < hi; p++) {
        st = (st << 8) | m->mask[sc_of(u[p], before)];
        before = u[p];
        for (unsigned cand = (unsigned)(~st >> 56) & 0xff; cand; cand &= cand - 1) {
            int b = __builtin_ctz(cand);
            for (uint32_t k = m->by_last[b][u[p]]; k < m->by_last[b][u[p] + 1]; k++) {
                Py_ssize_t i = m->order[k], len = m->len[i];
                if (len <= p + 1 - lo && memcmp(u + p + 1 - len, m->store + m->off[i], (size_t)len) == 0) return 1;
            }
        }
    }
    return 0;
}

/* Whether a literal of bucket `b` ends at u[p]: 0 no, 1 yes. Tolerant (a text read whole: one newline may stand
 * between any two of an anchor's bytes, as in hit_line_regex(across_newlines=True)): 2 when such an occurrence
 * across a newline is the one the regex takes in its first line - there, the regex's match is the line from its
 * start up to the occurrence that starts last (greedy `[^\n]*`; at the same start the longer anchor, i.e. the
 * one across the newline), so an anchor lying wholly in that line after the occurrence's start hides it. */
static int ends_at(const Matcher *m, int b, const unsigned char *u, Py_ssize_t p, Py_ssize_t size, int tolerant) {
    const unsigned char *store = (const unsigned char *)m->store;
    int found = 0, k = m->tail[b];
    const uint32_t *lits, *stop;
    if (p + 1 < k) return 0; /* (no literal of the bucket fits before p, newlines or not) */
    if (tolerant && newline_in_tail(u, p, k)) { /* an anchor may be cut within its tail */
        lits = m->order + m->by_last[b][u[p]];
        stop = m->order + m->by_last[b][u[p] + 1];
    } else {
        /* (a literal of another bucket that hashes alike is compared too: where it matches, its own bucket is a
         * candidate as well, so the caller's answer is the same) */
        unsigned h = tail_hash(tail_key(u, p, k), b);
        lits = m->hashed + m->hash_at[h];
        stop = m->hashed + m->hash_at[h + 1];
    }
    for (; lits < stop; lits++) {
        Py_ssize_t i = *lits, len = m->len[i];
        const unsigned char *lit = store + m->off[i];
        if (!tolerant) {
            if (len <= p + 1 && memcmp(u + p + 1 - len, lit, (size_t)len) == 0) return 1;
            continue;
        }
        Py_ssize_t q = p, j = len - 1;
        int crossed = 0;
        for (;;) {
            if (u[q] != lit[j]) break;
            if (j == 0) {
                if (!crossed) found = 1;
                else {
                    const unsigned char *nl = memchr(u + q, '\n', (size_t)(size - q));
                    if (!any_within(m, u, q + 1, nl ? nl - u : size)) return 2;
                }
                break;
            }
            j--;
            if (--q < 0) break;
            if (u[q] == '\n') {
                crossed = 1;
                if (--q < 0 || u[q] == '\n') break;
            }
        }
    }
    return found;
}

typedef struct { Py_ssize_t *at, *len, n, cap; } Hits;

static int hit_add(Hits *h, Py_ssize_t at, Py_ssize_t len) {
    if (h->n == h->cap) {
        Py_ssize_t cap = h->cap ? 2 * h->cap : 256;
        Py_ssize_t *a = PyMem_RawRealloc(h->at, (size_t)cap * sizeof *a);
        if (a) h->at = a;
        Py_ssize_t *b = a ? PyMem_RawRealloc(h->len, (size_t)cap * sizeof *b) : NULL;
        if (!b) return -1;
        h->len = b;
        h->cap = cap;
    }
    h->at[h->n] = at;
    h->len[h->n++] = len;
    return 0;
}

/* The lines of a text holding an anchor (start, length: without the newline), in order, each once: what
 * extract_all of hit_line_regex gives. Tolerant (a text read whole): 1 when an anchor is cut by a newline (the slow
 * path reads it), the hits unfinished; without, the rest of a hit line is not searched. -1: out of memory.
 * Line by line (memchr): a single newline in a tolerant text leaves the state as it is (an anchor may go on after
 * it); any other resets it. Within a line, four bytes a step, each byte's super-character from one 16-bit load. */
static int scan_text(const Matcher *m, const char *data, Py_ssize_t size, int tolerant, Hits *h) {
    const unsigned char *u = (const unsigned char *)data;
    const uint64_t *mask = m->mask, open = 0xff00000000000000ULL; /* below: some bucket's top bit clear */
    uint64_t st = m->reset;
    unsigned before = '\n';
    Py_ssize_t last = -1; /* the last hit line's start */
    h->n = 0;
    for (Py_ssize_t line = 0; line <= size;) {
        const unsigned char *nl = memchr(u + line, '\n', (size_t)(size - line));
        Py_ssize_t end = nl ? nl - u : size, p = line;
        if (p < end) {
            st = (st << 8) | mask[sc_of(u[p], before)];
            goto check;
            for (;;) {
                while (p + 4 < end) { /* (p + 4 < end: the bytes p + 1 .. p + 4 are in the line) */
                    st = (st << 8) | mask[SC_AT(u, p + 1)];
                    if (st < open) { p += 1; goto check; }
                    st = (st << 8) | mask[SC_AT(u, p + 2)];
                    if (st < open) { p += 2; goto check; }
                    st = (st << 8) | mask[SC_AT(u, p + 3)];
                    if (st < open) { p += 3; goto check; }
                    st = (st << 8) | mask[SC_AT(u, p + 4)];
                    if (st < open) { p += 4; goto check; }
                    p += 4;
                }
                if (++p >= end) break;
                st = (st << 8) | mask[SC_AT(u, p)];
            check:
                if (st >= open) continue;
                unsigned cand = (unsigned)(~st >> 56) & 0xff;
                if (!(cand & m->short_buckets) && p >= 3 && !(tolerant && newline_in_tail(u, p, 4))) {
                    unsigned h = tail4_hash(u, p); /* (a literal cut by a newline within its tail: looked up) */
                    if (!(m->tail4[h >> 3] & (1u << (h & 7)))) continue;
                }
                int got = 0;
                while (cand && got != 2) {
                    int b = __builtin_ctz(cand);
                    cand &= cand - 1;
                    int r = ends_at(m, b, u, p, size, tolerant);
                    if (r > got) got = r;
                }
                if (got == 2) return 1;
                if (!got || line == last) continue;
                if (hit_add(h, line, end - line) < 0) return -1;
                last = line;
                if (!tolerant) break; /* the rest of the line is not searched */
            }
            before = u[end - 1];
        }
        if (end >= size) break;
        if (!(tolerant && end > line)) { /* (tolerant: an anchor may go on after a single newline) */
            st = m->reset;
            before = '\n';
        }
        line = end + 1;
    }
    return 0;
}

/* Whether some bucket in `cand` has a literal ending at u[p] (plain text: no newline inside an anchor). */
static int plain_hit(const Matcher *m, unsigned cand, const unsigned char *u, Py_ssize_t p, Py_ssize_t size) {
    if (!(cand & ~m->long_buckets) && p >= 7) {
        unsigned h = tail8_hash(u, p);
        if (!(m->tail8[h >> 3] & (1u << (h & 7)))) return 0;
    } else if (!(cand & m->short_buckets) && p >= 3) {
        unsigned h = tail4_hash(u, p);
        if (!(m->tail4[h >> 3] & (1u << (h & 7)))) return 0;
    }
    for (; cand; cand &= cand - 1)
        if (ends_at(m, __builtin_ctz(cand), u, p, size, 0)) return 1;
    return 0;
}

/* scan_text for a text read as lines (not tolerant), without cutting it into lines first: the filter runs over
 * the whole text, newlines included. No anchor holds a newline, so a newline's super-characters keep every bucket's
 * bit set at the distances its literals cover (as the reset state after a newline does, or more: the state from the
 * line before is or-ed in, which only drops candidates no literal within the line can be): the same candidates
 * ending in a line's literals, fewer others, and no per-line memchr. A hit's line is looked for around it (back to
 * the last newline, on to the next), and the scan goes on after it. Four bytes a step, their states' top bytes
 * and-ed into one test. */
static int scan_plain(const Matcher *m, const unsigned char *u, Py_ssize_t size, Hits *h) {
    const uint64_t *mask = m->mask, open = 0xff00000000000000ULL; /* below: some bucket's top bit clear */
    h->n = 0;
    for (Py_ssize_t line = 0; line < size;) { /* line: a line's start, where the scan (re)starts */
        Py_ssize_t p = line;
        uint64_t st = (m->reset << 8) | mask[sc_of(u[p], '\n')];
        goto check;
        for (;;) {
            while (p + 4 < size) { /* (the four states from st each: no chain of shifts from byte to byte) */
                uint64_t m1 = mask[SC_AT(u, p + 1)], m2 = mask[SC_AT(u, p + 2)];
                uint64_t m3 = mask[SC_AT(u, p + 3)], m4 = mask[SC_AT(u, p + 4)];
                uint64_t t2 = (m1 << 8) | m2, t3 = (t2 << 8) | m3;
                uint64_t s1 = (st << 8) | m1, s2 = (st << 16) | t2, s3 = (st << 24) | t3;
                uint64_t s4 = (st << 32) | (t3 << 8) | m4;
                if ((s1 & s2 & s3 & s4) < open) {
                    if (s1 < open) { st = s1; p += 1; }
                    else if (s2 < open) { st = s2; p += 2; }
                    else if (s3 < open) { st = s3; p += 3; }
                    else { st = s4; p += 4; }
                    goto check;
                }
                st = s4;
                p += 4;
            }
            if (++p >= size) return 0;
            st = (st << 8) | mask[SC_AT(u, p)];
        check:
            if (st >= open || !plain_hit(m, (unsigned)(~st >> 56) & 0xff, u, p, size)) continue;
            Py_ssize_t start = p; /* (u[p] ends an anchor: not a newline) */
            while (start > line && u[start - 1] != '\n') start--;
            const unsigned char *nl = memchr(u + p, '\n', (size_t)(size - p));
            Py_ssize_t end = nl ? nl - u : size;
            if (hit_add(h, start, end - start) < 0) return -1;
            line = end + 1; /* the rest of the line is not searched */
            break;
        }
    }
    return 0;
}

static PyObject *scan_cut(PyObject *self, PyObject *args) {
    PyObject *matcher, *texts, *firsts, *wholes;
    int following;
    if (!PyArg_ParseTuple(args, "O!O!O!O!p", &MatcherType, &matcher, &PyList_Type, &texts, &PyList_Type, &firsts,
                          &PyList_Type, &wholes, &following))
        return NULL;
    const Matcher *m = (const Matcher *)matcher;
    if (!m->store) return PyErr_Format(PyExc_ValueError, "scan_cut: the matcher is not initialised");
    Py_ssize_t nt = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(firsts) != nt || PyList_GET_SIZE(wholes) != nt || nt > UINT32_MAX)
        return PyErr_Format(PyExc_ValueError, "scan_cut: lists of different lengths");
    Text *ts = PyMem_RawCalloc((size_t)nt + 1, sizeof *ts);
    Py_buffer *views = PyMem_RawCalloc((size_t)nt + 1, sizeof *views); /* the texts' bytes, read without the GIL */
    Py_ssize_t nviews = 0;
    uint8_t *slow = PyMem_RawCalloc((size_t)nt + 1, 1);
    Rows r = {0};
    Hits h = {0};
    PyObject *result = NULL;
    if (!ts || !views || !slow) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < nt; i++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(texts, i), &views[i], PyBUF_SIMPLE) < 0) goto done;
        nviews = i + 1;
        ts[i].data = views[i].buf;
        ts[i].size = views[i].len;
        ts[i].first = PyLong_AsLongLong(PyList_GET_ITEM(firsts, i));
        ts[i].whole = PyObject_IsTrue(PyList_GET_ITEM(wholes, i));
        if ((ts[i].first == -1 || ts[i].whole < 0) && PyErr_Occurred()) goto done;
    }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nt && !err; i++) {
        const Text *t = &ts[i];
        int s = t->whole ? scan_text(m, t->data, t->size, 1, &h)
                        : scan_plain(m, (const unsigned char *)t->data, t->size, &h);
        if (s < 0) err = -1;
        else if (s > 0) slow[i] = 1; /* an anchor cut by a newline: the slow path reads this text */
        else err = cut_text(&r, (uint32_t)i, t, h.at, h.len, h.n, following);
    }
    Py_END_ALLOW_THREADS
    if (err) { PyErr_NoMemory(); goto done; }
    PyObject *raw = PyBytes_FromStringAndSize(NULL, r.bytes ? r.bytes - 1 : 0);
    if (!raw) goto done;
    char *out = PyBytes_AS_STRING(raw);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t j = 0; j < r.len; j++) {
        memcpy(out, r.p[j], (size_t)r.n[j]);
        out += r.n[j];
        if (j + 1 < r.len) *out++ = '\n';
    }
    Py_END_ALLOW_THREADS
    PyObject *slows = PyList_New(0);
    for (Py_ssize_t i = 0; slows && i < nt; i++) {
        PyObject *v = slow[i] ? PyLong_FromSsize_t(i) : NULL;
        if (slow[i] && (!v || PyList_Append(slows, v) < 0)) Py_CLEAR(slows);
        Py_XDECREF(v);
    }
    static const char none[1];
    if (slows)
        result = Py_BuildValue("y#y#y#NN", r.len ? (const char *)r.text : none, r.len * (Py_ssize_t)sizeof *r.text,
                               r.len ? (const char *)r.line : none, r.len * (Py_ssize_t)sizeof *r.line,
                               r.len ? (const char *)r.hit : none, r.len, raw, slows);
    else
        Py_DECREF(raw);
done:
    for (Py_ssize_t i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    PyMem_RawFree(views);
    PyMem_RawFree(ts); PyMem_RawFree(slow); PyMem_RawFree(h.at); PyMem_RawFree(h.len);
    PyMem_RawFree(r.text); PyMem_RawFree(r.line); PyMem_RawFree(r.hit); PyMem_RawFree((void *)r.p); PyMem_RawFree(r.n);
    return result;
}


static PyObject *newlines(PyObject *self, PyObject *args) {
    Py_buffer v;
    Py_ssize_t start, end, k;
    if (!PyArg_ParseTuple(args, "y*nn", &v, &start, &end)) return NULL;
    if (start < 0) start = 0;
    if (end > v.len) end = v.len;
    if (end < start) end = start;
    Py_BEGIN_ALLOW_THREADS
    k = count_nl((const char *)v.buf + start, (const char *)v.buf + end);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&v);
    return PyLong_FromSsize_t(k);
}


/* ---- utf8(texts): whether every text is valid UTF-8 (as Rust's str::from_utf8 and Python's strict decoder
 * require: no overlong form, no surrogate, nothing past U+10FFFF), without the GIL; ASCII 8 bytes at a time ---- */

static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        if (c < 0xC2) return 0; /* a continuation byte, or an overlong 2-byte form */
        if (c < 0xE0) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
            continue;
        }
        if (c < 0xF0) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F)) return 0; /* overlong, surrogate */
            i += 3;
            continue;
        }
        if (c < 0xF5) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] > 0x8F)) return 0; /* overlong, > U+10FFFF */
            i += 4;
            continue;
        }
        return 0;
    }
    return 1;
}

static PyObject *utf8(PyObject *self, PyObject *texts) {
    if (!PyList_Check(texts)) return PyErr_Format(PyExc_TypeError, "utf8: a list of bytes-like objects");
    Py_ssize_t nt = PyList_GET_SIZE(texts), nviews = 0;
    Py_buffer *views = PyMem_RawCalloc((size_t)nt + 1, sizeof *views);
    if (!views) return PyErr_NoMemory();
    int ok = 1;
    for (Py_ssize_t i = 0; i < nt; i++, nviews++)
        if (PyObject_GetBuffer(PyList_GET_ITEM(texts, i), &views[i], PyBUF_SIMPLE) < 0) { ok = -1; break; }
    if (ok > 0) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < nt && ok; i++) ok = utf8_ok(views[i].buf, views[i].len);
        Py_END_ALLOW_THREADS
    }
    for (Py_ssize_t i = 0; i < nviews; i++) PyBuffer_Release(&views[i]);
    PyMem_RawFree(views);
    if (ok < 0) return NULL;
    return PyBool_FromLong(ok);
}


/* ---- Block: a group's texts in one reused block of memory, imported by polars without a copy ---- */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define POOL_MAX 4 /* free blocks kept: the groups in flight (two scanning, one being read) and one spare */

/* The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html). */
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

/* The memory of a block: shared by the Python object and every array exported from it, freed (to the pool) by the
 * last of them, on whichever thread polars drops its array. */
typedef struct Memory {
    char *base;
    size_t cap;
    atomic_long refs;
    struct Memory *next; /* in the pool */
} Memory;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static Memory *pool;
static int pool_size, pool_max = POOL_MAX; /* pool_max 0 after trim(): blocks freed then are unmapped at once */

static Memory *memory_get(size_t cap) {
    Memory *m = NULL;
    pthread_mutex_lock(&pool_lock);
    for (Memory **at = &pool; *at; at = &(*at)->next)
        if ((*at)->cap == cap) { m = *at; *at = m->next; pool_size--; break; }
    pthread_mutex_unlock(&pool_lock);
    if (!m) {
        m = malloc(sizeof *m);
        if (!m) return NULL;
        m->base = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m->base == MAP_FAILED) { free(m); return NULL; }
        m->cap = cap;
    }
    atomic_init(&m->refs, 1);
    m->next = NULL;
    pthread_mutex_lock(&pool_lock);
    pool_max = POOL_MAX;
    pthread_mutex_unlock(&pool_lock);
    return m;
}

static void memory_drop(Memory *m) {
    if (atomic_fetch_sub(&m->refs, 1) != 1) return;
    pthread_mutex_lock(&pool_lock);
    int keep = pool_size < pool_max;
    if (keep) { m->next = pool; pool = m; pool_size++; }
    pthread_mutex_unlock(&pool_lock);
    if (!keep) { munmap(m->base, m->cap); free(m); }
}

/* trim(): free the blocks kept for reuse, and the blocks in use when they are freed (until a block is made). */
static PyObject *trim(PyObject *self, PyObject *unused) {
    pthread_mutex_lock(&pool_lock);
    Memory *m = pool;
    pool = NULL;
    pool_size = pool_max = 0;
    pthread_mutex_unlock(&pool_lock);
    Py_BEGIN_ALLOW_THREADS
    while (m) {
        Memory *next = m->next;
        munmap(m->base, m->cap);
        free(m);
        m = next;
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD
    Memory *mem;
    size_t used;
    int64_t *offsets; /* n + 1 */
    Py_ssize_t n, ncap;
} Block;

static int block_init(Block *b, PyObject *args, PyObject *kw) {
    Py_ssize_t cap;
    if (b->mem) { PyErr_SetString(PyExc_TypeError, "Block: already initialised"); return -1; }
    if (!PyArg_ParseTuple(args, "n", &cap)) return -1;
    if (cap <= 0) { PyErr_SetString(PyExc_ValueError, "Block: capacity must be positive"); return -1; }
    long page = sysconf(_SC_PAGESIZE);
    cap = (cap + page - 1) / page * page;
    b->mem = memory_get((size_t)cap);
    b->offsets = PyMem_RawCalloc(16, sizeof *b->offsets);
    if (!b->mem || !b->offsets) { PyErr_NoMemory(); return -1; }
    b->ncap = 15;
    return 0;
}

static void block_dealloc(Block *b) {
    if (b->mem) memory_drop(b->mem);
    PyMem_RawFree(b->offsets);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static int block_ready(Block *b) {
    if (b->mem) return 0;
    PyErr_SetString(PyExc_ValueError, "Block: not initialised");
    return -1;
}

/* One more text of `len` bytes, already at the end of the used memory. */
static int block_push(Block *b, size_t len) {
    if (b->n == b->ncap) {
        int64_t *o = PyMem_RawRealloc(b->offsets, (size_t)(2 * b->ncap + 1) * sizeof *o);
        if (!o) { PyErr_NoMemory(); return -1; }
        b->offsets = o;
        b->ncap *= 2;
    }
    b->used += len;
    b->offsets[++b->n] = (int64_t)b->used;
    return 0;
}

/* read_file(path) -> bytes read, or -1 when the file does not fit in what is left (nothing kept); OSError. */
static PyObject *block_read_file(Block *b, PyObject *arg) {
    PyObject *path = NULL;
    if (block_ready(b) < 0 || !PyUnicode_FSConverter(arg, &path)) return NULL;
    char *dst = b->mem->base + b->used;
    size_t room = b->mem->cap - b->used;
    ssize_t got = 0, n = 0;
    int err = 0, fits = 1;
    Py_BEGIN_ALLOW_THREADS
    int fd = open(PyBytes_AS_STRING(path), O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) err = errno;
    else if (fstat(fd, &st) < 0) err = errno;
    else if ((size_t)st.st_size > room) fits = 0;
    while (!err && fits) { /* to the end: the file may have grown since (the end of the block: too big) */
        if ((size_t)got == room) {
            char probe;
            n = read(fd, &probe, 1);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) err = errno;
            else if (n > 0) fits = 0;
            break;
        }
        n = read(fd, dst + got, room - (size_t)got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) err = errno;
        if (n <= 0) break;
        got += n;
    }
    if (fd >= 0) close(fd);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, arg);
        Py_DECREF(path);
        return NULL;
    }
    Py_DECREF(path);
    if (!fits) return PyLong_FromLong(-1);
    if (block_push(b, (size_t)got) < 0) return NULL;
    return PyLong_FromSsize_t(got);
}

/* append(bytes-like) -> bytes copied, or -1 when they do not fit in what is left (nothing kept). */
static PyObject *block_append(Block *b, PyObject *arg) {
    Py_buffer v;
    if (block_ready(b) < 0 || PyObject_GetBuffer(arg, &v, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    if ((size_t)v.len > b->mem->cap - b->used) out = PyLong_FromLong(-1);
    else {
        memcpy(b->mem->base + b->used, v.buf, (size_t)v.len);
        out = block_push(b, (size_t)v.len) < 0 ? NULL : PyLong_FromSsize_t(v.len);
    }
    PyBuffer_Release(&v);
    return out;
}

/* pop(): forget the last text (its memory is reused by the next). */
static PyObject *block_pop(Block *b, PyObject *unused) {
    if (block_ready(b) < 0) return NULL;
    if (b->n == 0) { PyErr_SetString(PyExc_IndexError, "Block.pop: no text"); return NULL; }
    b->n--;
    b->used = (size_t)b->offsets[b->n];
    Py_RETURN_NONE;
}

static void schema_release(struct ArrowSchema *s) { s->release = NULL; }

typedef struct { Memory *mem; int64_t *offsets; const void *buffers[3]; } Exported;

static void array_release(struct ArrowArray *a) {
    Exported *e = a->private_data;
    memory_drop(e->mem);
    free(e->offsets);
    free(e);
    a->release = NULL;
}

static void schema_capsule_free(PyObject *c) {
    struct ArrowSchema *s = PyCapsule_GetPointer(c, "arrow_schema");
    if (s && s->release) s->release(s);
    free(s);
}

static void array_capsule_free(PyObject *c) {
    struct ArrowArray *a = PyCapsule_GetPointer(c, "arrow_array");
    if (a && a->release) a->release(a);
    free(a);
}

/* __arrow_c_array__(requested_schema=None): the texts so far as a large_binary array, sharing the memory. */
static PyObject *block_arrow(Block *b, PyObject *args, PyObject *kw) {
    static char *names[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;
    if (block_ready(b) < 0 || !PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &requested)) return NULL;
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    Exported *e = calloc(1, sizeof *e);
    int64_t *offsets = malloc((size_t)(b->n + 1) * sizeof *offsets); /* later texts do not change this array */
    if (!s || !a || !e || !offsets) {
        free(s); free(a); free(e); free(offsets);
        return PyErr_NoMemory();
    }
    memcpy(offsets, b->offsets, (size_t)(b->n + 1) * sizeof *offsets);
    *s = (struct ArrowSchema){.format = "Z", .name = "", .flags = 0, .release = schema_release};
    atomic_fetch_add(&b->mem->refs, 1);
    e->mem = b->mem;
    e->offsets = offsets;
    e->buffers[0] = NULL;
    e->buffers[1] = offsets;
    e->buffers[2] = b->mem->base;
    *a = (struct ArrowArray){.length = b->n, .n_buffers = 3, .buffers = e->buffers, .release = array_release,
                             .private_data = e};
    PyObject *sc = PyCapsule_New(s, "arrow_schema", schema_capsule_free);
    if (!sc) { free(s); array_release(a); free(a); return NULL; }
    PyObject *ac = PyCapsule_New(a, "arrow_array", array_capsule_free);
    if (!ac) { Py_DECREF(sc); array_release(a); free(a); return NULL; }
    return Py_BuildValue("NN", sc, ac);
}

static int block_getbuffer(Block *b, Py_buffer *view, int flags) {
    if (block_ready(b) < 0) { view->obj = NULL; return -1; }
    return PyBuffer_FillInfo(view, (PyObject *)b, b->mem->base, (Py_ssize_t)b->used, 1, flags);
}

static Py_ssize_t block_len(Block *b) { return b->n; }

static PyObject *block_used(Block *b, void *unused) { return PyLong_FromSize_t(b->used); }

static PyObject *block_room(Block *b, void *unused) {
    return PyLong_FromSize_t(b->mem ? b->mem->cap - b->used : 0);
}

static PyMethodDef block_methods[] = {
    {"read_file", (PyCFunction)block_read_file, METH_O, "Read a file to its end after the texts so far."},
    {"append", (PyCFunction)block_append, METH_O, "Copy bytes after the texts so far."},
    {"pop", (PyCFunction)block_pop, METH_NOARGS, "Forget the last text."},
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))block_arrow, METH_VARARGS | METH_KEYWORDS,
     "The texts as an Arrow large_binary array sharing this memory."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef block_getset[] = {
    {"used", (getter)block_used, NULL, "bytes used by the texts", NULL},
    {"room", (getter)block_room, NULL, "bytes left", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods block_seq = {.sq_length = (lenfunc)block_len};
static PyBufferProcs block_buffer = {.bf_getbuffer = (getbufferproc)block_getbuffer};

static PyTypeObject BlockType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ncclpm.ingest._textcut.Block",
    .tp_basicsize = sizeof(Block),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A group's texts in one block of memory (see the module's comment).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)block_init,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_methods = block_methods,
    .tp_getset = block_getset,
    .tp_as_sequence = &block_seq,
    .tp_as_buffer = &block_buffer,
};

static PyMethodDef methods[] = {
    {"scan_cut", scan_cut, METH_VARARGS,
     "Find the lines holding an anchor and cut them and their neighbours out of a group of texts."},
    {"utf8", utf8, METH_O, "Whether every text of a list (bytes-like) is valid UTF-8."},
    {"newlines", newlines, METH_VARARGS, "How many newlines data[start:end] holds."},
    {"trim", trim, METH_NOARGS, "Free the blocks kept for reuse, and the blocks in use once freed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_textcut", NULL, -1, methods};

PyMODINIT_FUNC PyInit__textcut(void) {
    if (PyType_Ready(&BlockType) < 0 || PyType_Ready(&MatcherType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddObjectRef(m, "Block", (PyObject *)&BlockType) < 0 ||
              PyModule_AddObjectRef(m, "Matcher", (PyObject *)&MatcherType) < 0))
        Py_CLEAR(m);
    return m;
}
