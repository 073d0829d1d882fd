/* Cutting the hit lines (and the lines around them) out of a group of texts, in C: what
 * ncclpm.ingest.rawscan.cut_rows does in Python (the reference; the rules are explained there), without the GIL,
 * so that two scan threads run in parallel.  Optional: built by hatch_build.py when a C compiler is present.
 *
 * cut(texts, hits, first_lines, whole, following) -> (text, line, hit, raw, slow)
 *   texts: bytes (valid UTF-8); hits: for each text, its hit lines (str, the regex matches, in order);
 *   first_lines: line number of each text's first line; whole: read as Python splits lines (also: the line
 *   before each hit is cut out, and a hit holding a newline sends the text to the slow path);
 *   following: also the line after each hit.
 *   Returns the rows as arrays (text: uint32, line: int64, hit: uint8, as bytes), their texts joined by "\n"
 *   (a row never holds one) and the indices of the texts sent to the slow path. */
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

/* Newlines in [p, end), eight bytes at a time: a byte of x is zero exactly where the high bit of t is clear; the
 * ones are summed per byte lane (at most 255 words between two sums of the lanes). */
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
    Py_ssize_t nh = 0, caph = 0;
    const char **hp = NULL;
    Py_ssize_t *hn = NULL;
    uint8_t *slow = PyMem_RawCalloc((size_t)nt + 1, 1);
    Rows r = {0};
    PyObject *result = NULL;
    if (!held || !ts || !slow) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyObject *data = PyList_GET_ITEM(texts, i), *lines = PyList_GET_ITEM(hits, i);
        if (!PyBytes_Check(data) || !PyList_Check(lines)) {
            PyErr_SetString(PyExc_TypeError, "cut: texts are bytes, hits lists of str");
            goto done;
        }
        if (PyList_Append(held, data) < 0 || PyList_Append(held, lines) < 0) goto done;
        ts[i].data = PyBytes_AS_STRING(data);
        ts[i].size = PyBytes_GET_SIZE(data);
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
    Py_XDECREF(held);
    PyMem_RawFree(ts); PyMem_RawFree(hp); PyMem_RawFree(hn); PyMem_RawFree(slow);
    PyMem_RawFree(r.text); PyMem_RawFree(r.line); PyMem_RawFree(r.hit); PyMem_RawFree((void *)r.p); PyMem_RawFree(r.n);
    return result;
}

static PyMethodDef methods[] = {
    {"cut", cut, METH_VARARGS, "Cut the hit lines and their neighbours out of a group of texts (see rawscan.cut_rows)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_textcut", NULL, -1, methods};

PyMODINIT_FUNC PyInit__textcut(void) { return PyModule_Create(&module); }
