/* The text path in C, optional (built by hatch_build.py when a C compiler is present; the Python code does the same
 * work without it):
 *
 * cut(texts, hits, first_lines, whole, following) -> (text, line, hit, raw, slow)
 *   Cuts the hit lines (and the lines around them) out of a group of texts: what
 *   ncclpm.ingest.rawscan.cut_rows does in Python (the reference; the rules are explained there), without the GIL,
 *   so that the scan threads run in parallel.
 *   texts: bytes-like (valid UTF-8); hits: for each text, its hit lines (str, the regex matches, in order);
 *   first_lines: line number of each text's first line; whole: read as Python splits lines (also: the line
 *   before each hit is cut out, and a hit holding a newline sends the text to the slow path);
 *   following: also the line after each hit.
 *   Returns the rows as arrays (text: uint32, line: int64, hit: uint8, as bytes), their texts joined by "\n"
 *   (a row never holds one) and the indices of the texts sent to the slow path.
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

/* One text's rows (rawscan.cut_rows, line for line). -1: out of memory; -2: a hit line not in the text. */
static int cut_text(Rows *r, uint32_t index, const Text *t, const char *const *hp, const Py_ssize_t *hn, int following) {
    const char *data = t->data;
    Py_ssize_t size = t->size, pos = 0;
    int64_t number = t->first, last = t->first - 1;
    int py = t->whole;
    for (Py_ssize_t k = 0; k < t->nh; k++) {
        const char *line = hp[k];
        Py_ssize_t len = hn[k];
        const char *found = len ? memmem(data + pos, (size_t)(size - pos), line, (size_t)len) : data + pos;
        if (!found) return -2;
        Py_ssize_t at = found - data, end = at + len;
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

static PyObject *cut(PyObject *self, PyObject *args) {
    PyObject *texts, *hits, *firsts, *wholes;
    int following;
    if (!PyArg_ParseTuple(args, "O!O!O!O!p", &PyList_Type, &texts, &PyList_Type, &hits, &PyList_Type, &firsts,
                          &PyList_Type, &wholes, &following))
        return NULL;
    Py_ssize_t nt = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(hits) != nt || PyList_GET_SIZE(firsts) != nt || PyList_GET_SIZE(wholes) != nt || nt > UINT32_MAX)
        return PyErr_Format(PyExc_ValueError, "cut: lists of different lengths");
    PyObject *held = PyList_New(0); /* every object whose buffer is read without the GIL */
    Text *ts = PyMem_RawCalloc((size_t)nt + 1, sizeof *ts);
    Py_buffer *views = PyMem_RawCalloc((size_t)nt + 1, sizeof *views); /* the texts' bytes, read without the GIL */
    Py_ssize_t nviews = 0;
    Py_ssize_t nh = 0, caph = 0;
    const char **hp = NULL;
    Py_ssize_t *hn = NULL;
    uint8_t *slow = PyMem_RawCalloc((size_t)nt + 1, 1);
    Rows r = {0};
    PyObject *result = NULL;
    if (!held || !ts || !views || !slow) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyObject *data = PyList_GET_ITEM(texts, i), *lines = PyList_GET_ITEM(hits, i);
        if (!PyList_Check(lines)) {
            PyErr_SetString(PyExc_TypeError, "cut: hits are lists of str");
            goto done;
        }
        if (PyObject_GetBuffer(data, &views[i], PyBUF_SIMPLE) < 0) goto done; /* held until the end */
        nviews = i + 1;
        if (PyList_Append(held, lines) < 0) goto done;
        ts[i].data = views[i].buf;
        ts[i].size = views[i].len;
        ts[i].first = PyLong_AsLongLong(PyList_GET_ITEM(firsts, i));
        ts[i].whole = PyObject_IsTrue(PyList_GET_ITEM(wholes, i));
        if ((ts[i].first == -1 || ts[i].whole < 0) && PyErr_Occurred()) goto done;
        ts[i].h0 = nh;
        ts[i].nh = PyList_GET_SIZE(lines);
        if (nh + ts[i].nh > caph) {
            caph = 2 * (nh + ts[i].nh) + 64;
            const char **a = PyMem_RawRealloc(hp, (size_t)caph * sizeof *hp);
            if (a) hp = a;
            Py_ssize_t *b = a ? PyMem_RawRealloc(hn, (size_t)caph * sizeof *hn) : NULL;
            if (!b) { PyErr_NoMemory(); goto done; }
            hn = b;
        }
        for (Py_ssize_t k = 0; k < ts[i].nh; k++) {
            PyObject *s = PyList_GET_ITEM(lines, k);
            if (!PyUnicode_Check(s)) { PyErr_SetString(PyExc_TypeError, "cut: hit lines are str"); goto done; }
            if (!(hp[nh] = PyUnicode_AsUTF8AndSize(s, &hn[nh]))) goto done;
            if (PyList_Append(held, s) < 0) goto done; /* the list may change; the str stays */
            nh++;
        }
    }
    int err = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nt && !err; i++) {
        const Text *t = &ts[i];
        if (t->whole) { /* an anchor cut by a newline: the slow path reads this text */
            for (Py_ssize_t k = 0; k < t->nh && !slow[i]; k++)
                slow[i] = memchr(hp[t->h0 + k], '\n', (size_t)hn[t->h0 + k]) != NULL;
            if (slow[i]) continue;
        }
        err = cut_text(&r, (uint32_t)i, t, hp + t->h0, hn + t->h0, following);
    }
    Py_END_ALLOW_THREADS
    if (err == -1) { PyErr_NoMemory(); goto done; }
    if (err == -2) { PyErr_SetString(PyExc_ValueError, "cut: a hit line is not in its text"); goto done; }
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
    Py_XDECREF(held);
    PyMem_RawFree(ts); PyMem_RawFree(hp); PyMem_RawFree(hn); PyMem_RawFree(slow);
    PyMem_RawFree(r.text); PyMem_RawFree(r.line); PyMem_RawFree(r.hit); PyMem_RawFree((void *)r.p); PyMem_RawFree(r.n);
    return result;
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
    {"cut", cut, METH_VARARGS, "Cut the hit lines and their neighbours out of a group of texts (see rawscan.cut_rows)."},
    {"trim", trim, METH_NOARGS, "Free the blocks kept for reuse, and the blocks in use once freed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_textcut", NULL, -1, methods};

PyMODINIT_FUNC PyInit__textcut(void) {
    if (PyType_Ready(&BlockType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "Block", (PyObject *)&BlockType) < 0) Py_CLEAR(m);
    return m;
}
