/* stepscope.trace._fastread: a piece of a trace's traceEvents array, parsed by yyjson, as columns.

    columns(text, event_keys, args_keys) -> None | (strings, types, ints, reals, n)

``text``: any bytes-like object holding a JSON array of events (what jsonstream.TraceStream hands its decode
function). ``event_keys``: the keys read from each event, a tuple of bytes, the last of which is the object of
arguments (b"args"); ``args_keys``: the keys read from that object. Slot k is event_keys[k], then args_keys
after them. For n events and S slots, the result holds three S x n arrays, slot-major, as bytes:

    types  uint8   T_MISSING, T_NULL, T_INT, T_REAL, T_STR, T_TRUE, T_FALSE, T_ARRAY, T_OBJECT, T_OTHER
    ints   int64   the value of a T_INT; the index into ``strings`` of a T_STR
    reals  float64 the value of a T_REAL; the (rounded) value of a T_INT

``strings``: the distinct string values met, as str, in order of first appearance. A key given twice in one
object takes its last value. T_OTHER: an integer outside int64 or a real outside a double (read raw).

None, rather than columns, for anything the caller's own decoder must judge: text that yyjson does not read
as one strict JSON array (RFC 8259: no NaN, no comments, valid UTF-8), an entry that is not an object, an
``args`` that is neither an object nor null, a value nested more than MAX_DEPTH deep, or a string that is
not valid for Python. The caller then decodes the same text the slow way, which gives its result or its
error. No Python object is made per event: only one per distinct string.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "yyjson/yyjson.h"

enum { T_MISSING, T_NULL, T_INT, T_REAL, T_STR, T_TRUE, T_FALSE, T_ARRAY, T_OBJECT, T_OTHER };

#define MAX_SLOTS 64
#define MAX_DEPTH 200 /* below the nesting at which the Python decoders give up (about 500 to 1000) */

typedef struct {
    const char *ptr;
    size_t len;
} key_t_;

/* distinct strings: open addressing on (pointer, length) of yyjson's string bytes */
typedef struct {
    const char **ptr;
    size_t *len;
    int64_t *slot; /* code + 1; 0: empty */
    size_t cap, count;
    const char **order_ptr;
    size_t *order_len;
} strtab;

static uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL, w; /* eight bytes at a time */
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 29);
}

static int strtab_init(strtab *t, size_t cap) {
    memset(t, 0, sizeof(*t));
    t->cap = cap;
    t->ptr = PyMem_RawCalloc(cap, sizeof(char *));
    t->len = PyMem_RawCalloc(cap, sizeof(size_t));
    t->slot = PyMem_RawCalloc(cap, sizeof(int64_t));
    t->order_ptr = PyMem_RawCalloc(cap / 2 + 1, sizeof(char *));
    t->order_len = PyMem_RawCalloc(cap / 2 + 1, sizeof(size_t));
    return t->ptr && t->len && t->slot && t->order_ptr && t->order_len ? 0 : -1;
}

static void strtab_free(strtab *t) {
    PyMem_RawFree(t->ptr);
    PyMem_RawFree(t->len);
    PyMem_RawFree(t->slot);
    PyMem_RawFree(t->order_ptr);
    PyMem_RawFree(t->order_len);
}

static int strtab_grow(strtab *t) {
    strtab bigger;
    if (t->cap > ((size_t)1 << 40) || strtab_init(&bigger, t->cap * 2) < 0) {
        strtab_free(&bigger);
        return -1;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slot[i]) continue;
        size_t j = hash_bytes(t->ptr[i], t->len[i]) & (bigger.cap - 1);
        while (bigger.slot[j]) j = (j + 1) & (bigger.cap - 1);
        bigger.ptr[j] = t->ptr[i];
        bigger.len[j] = t->len[i];
        bigger.slot[j] = t->slot[i];
    }
    memcpy(bigger.order_ptr, t->order_ptr, t->count * sizeof(char *));
    memcpy(bigger.order_len, t->order_len, t->count * sizeof(size_t));
    bigger.count = t->count;
    strtab_free(t);
    *t = bigger;
    return 0;
}

/* the code of the string, added if new; -1 when out of memory */
static int64_t strtab_code(strtab *t, const char *p, size_t n) {
    if ((t->count + 1) * 2 > t->cap && strtab_grow(t) < 0) return -1;
    size_t j = hash_bytes(p, n) & (t->cap - 1);
    while (t->slot[j]) {
        if (t->len[j] == n && memcmp(t->ptr[j], p, n) == 0) return t->slot[j] - 1;
        j = (j + 1) & (t->cap - 1);
    }
    t->ptr[j] = p;
    t->len[j] = n;
    t->slot[j] = (int64_t)t->count + 1;
    t->order_ptr[t->count] = p;
    t->order_len[t->count] = n;
    return (int64_t)t->count++;
}

/* whether v holds containers nested no more than `left` deep (iteratively bounded recursion) */
static int depth_ok(yyjson_val *v, int left) {
    if (!yyjson_is_ctn(v)) return 1;
    if (left <= 0) return 0;
    size_t idx, max;
    yyjson_val *k, *x;
    if (yyjson_is_arr(v)) {
        yyjson_arr_foreach(v, idx, max, x) {
            if (yyjson_is_ctn(x) && !depth_ok(x, left - 1)) return 0;
        }
    } else {
        yyjson_obj_foreach(v, idx, max, k, x) {
            if (yyjson_is_ctn(x) && !depth_ok(x, left - 1)) return 0;
        }
    }
    return 1;
}

/* one value into slot (s, i); 0, or -1 for "let the caller decode it" / out of memory (*oom set) */
static int put(yyjson_val *v, size_t at, uint8_t *types, int64_t *ints, double *reals, strtab *tab,
               int *oom) {
    switch (yyjson_get_type(v)) {
    case YYJSON_TYPE_NULL:
        types[at] = T_NULL;
        return 0;
    case YYJSON_TYPE_BOOL:
        types[at] = yyjson_get_bool(v) ? T_TRUE : T_FALSE;
        return 0;
    case YYJSON_TYPE_NUM:
        switch (yyjson_get_subtype(v)) {
        case YYJSON_SUBTYPE_UINT: {
            uint64_t u = yyjson_get_uint(v);
            if (u > (uint64_t)INT64_MAX) {
                types[at] = T_OTHER;
                return 0;
            }
            types[at] = T_INT;
            ints[at] = (int64_t)u;
            reals[at] = (double)(int64_t)u;
            return 0;
        }
        case YYJSON_SUBTYPE_SINT:
            types[at] = T_INT;
            ints[at] = yyjson_get_sint(v);
            reals[at] = (double)ints[at];
            return 0;
        default:
            types[at] = T_REAL;
            reals[at] = yyjson_get_real(v);
            return 0;
        }
    case YYJSON_TYPE_STR: {
        int64_t code = strtab_code(tab, yyjson_get_str(v), yyjson_get_len(v));
        if (code < 0) {
            *oom = 1;
            return -1;
        }
        types[at] = T_STR;
        ints[at] = code;
        return 0;
    }
    case YYJSON_TYPE_ARR:
        if (!depth_ok(v, MAX_DEPTH)) return -1;
        types[at] = T_ARRAY;
        return 0;
    case YYJSON_TYPE_OBJ:
        if (!depth_ok(v, MAX_DEPTH)) return -1;
        types[at] = T_OBJECT;
        return 0;
    default: /* YYJSON_TYPE_RAW: a number too large for int64/double */
        types[at] = T_OTHER;
        return 0;
    }
}

static int read_keys(PyObject *seq, key_t_ *keys, Py_ssize_t *count, Py_ssize_t room) {
    if (!PyTuple_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "keys must be a tuple of bytes");
        return -1;
    }
    *count = PyTuple_GET_SIZE(seq);
    if (*count > room) {
        PyErr_SetString(PyExc_ValueError, "too many keys");
        return -1;
    }
    for (Py_ssize_t i = 0; i < *count; i++) {
        PyObject *k = PyTuple_GET_ITEM(seq, i);
        if (!PyBytes_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "keys must be a tuple of bytes");
            return -1;
        }
        keys[i].ptr = PyBytes_AS_STRING(k);
        keys[i].len = (size_t)PyBytes_GET_SIZE(k);
    }
    return 0;
}

static Py_ssize_t find_key(const key_t_ *keys, Py_ssize_t count, const char *p, size_t n) {
    for (Py_ssize_t k = count - 1; k >= 0; k--) {
        if (keys[k].len == n && memcmp(keys[k].ptr, p, n) == 0) return k;
    }
    return -1;
}

static PyObject *columns(PyObject *self, PyObject *args) {
    Py_buffer text;
    PyObject *event_seq, *args_seq;
    key_t_ keys[MAX_SLOTS];
    Py_ssize_t n_event = 0, n_args = 0;
    if (!PyArg_ParseTuple(args, "y*O!O!", &text, &PyTuple_Type, &event_seq, &PyTuple_Type, &args_seq))
        return NULL;
    PyObject *result = NULL, *strings = NULL, *types_b = NULL, *ints_b = NULL, *reals_b = NULL;
    yyjson_doc *doc = NULL;
    strtab tab;
    int tab_ready = 0, oom = 0;
    if (read_keys(event_seq, keys, &n_event, MAX_SLOTS) < 0 ||
        read_keys(args_seq, keys + n_event, &n_args, MAX_SLOTS - n_event) < 0)
        goto done;
    if (n_event < 1) {
        PyErr_SetString(PyExc_ValueError, "event_keys must end with the key of the arguments");
        goto done;
    }
    const Py_ssize_t args_slot = n_event - 1, slots = n_event + n_args;
    yyjson_read_err err;
    Py_BEGIN_ALLOW_THREADS
    doc = yyjson_read_opts((char *)text.buf, (size_t)text.len, YYJSON_READ_BIGNUM_AS_RAW, NULL, &err);
    Py_END_ALLOW_THREADS
    if (doc == NULL) {
        if (err.code == YYJSON_READ_ERROR_MEMORY_ALLOCATION) {
            PyErr_NoMemory();
            goto done;
        }
        result = Py_NewRef(Py_None);
        goto done;
    }
    yyjson_val *root = yyjson_doc_get_root(doc);
    if (!yyjson_is_arr(root)) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    const size_t n = yyjson_arr_size(root);
    if (n > (size_t)PY_SSIZE_T_MAX / 32 / (size_t)(slots ? slots : 1)) {
        PyErr_NoMemory();
        goto done;
    }
    types_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * slots));
    ints_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * slots * sizeof(int64_t)));
    reals_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * slots * sizeof(double)));
    if (!types_b || !ints_b || !reals_b) goto done;
    uint8_t *types = (uint8_t *)PyBytes_AS_STRING(types_b);
    int64_t *ints = (int64_t *)PyBytes_AS_STRING(ints_b);
    double *reals = (double *)PyBytes_AS_STRING(reals_b);
    memset(types, T_MISSING, n * slots);
    memset(ints, 0, n * slots * sizeof(int64_t));
    memset(reals, 0, n * slots * sizeof(double));
    size_t cap = 1024;
    if (strtab_init(&tab, cap) < 0) {
        tab_ready = 1;
        PyErr_NoMemory();
        goto done;
    }
    tab_ready = 1;
    int refused = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t i, max, j, jmax;
    yyjson_val *event, *k, *v, *ak, *av;
    yyjson_arr_foreach(root, i, max, event) {
        if (!yyjson_is_obj(event)) {
            refused = 1;
            break;
        }
        yyjson_obj_foreach(event, j, jmax, k, v) {
            Py_ssize_t s = find_key(keys, n_event, yyjson_get_str(k), yyjson_get_len(k));
            if (s == args_slot) {
                /* a later "args" replaces an earlier one: forget what that one gave */
                for (Py_ssize_t a = n_event; a < slots; a++) types[(size_t)a * n + i] = T_MISSING;
                if (yyjson_is_null(v)) {
                    types[(size_t)s * n + i] = T_NULL;
                    continue;
                }
                if (!yyjson_is_obj(v)) {
                    refused = 1;
                    break;
                }
                types[(size_t)s * n + i] = T_OBJECT;
                size_t q, qmax;
                yyjson_obj_foreach(v, q, qmax, ak, av) {
                    Py_ssize_t a = find_key(keys + n_event, n_args, yyjson_get_str(ak), yyjson_get_len(ak));
                    if (a < 0) {
                        if (yyjson_is_ctn(av) && !depth_ok(av, MAX_DEPTH - 2)) {
                            refused = 1;
                            break;
                        }
                        continue;
                    }
                    if (put(av, (size_t)(n_event + a) * n + i, types, ints, reals, &tab, &oom) < 0) {
                        refused = 1;
                        break;
                    }
                }
                if (refused) break;
            } else if (s >= 0) {
                if (put(v, (size_t)s * n + i, types, ints, reals, &tab, &oom) < 0) {
                    refused = 1;
                    break;
                }
            } else if (yyjson_is_ctn(v) && !depth_ok(v, MAX_DEPTH - 1)) {
                refused = 1;
                break;
            }
        }
        if (refused) break;
    }
    Py_END_ALLOW_THREADS
    if (oom) {
        PyErr_NoMemory();
        goto done;
    }
    if (refused) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    strings = PyList_New((Py_ssize_t)tab.count);
    if (!strings) goto done;
    for (size_t c = 0; c < tab.count; c++) {
        PyObject *s = PyUnicode_DecodeUTF8(tab.order_ptr[c], (Py_ssize_t)tab.order_len[c], "strict");
        if (!s) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto done;
            PyErr_Clear();
            result = Py_NewRef(Py_None);
            goto done;
        }
        PyList_SET_ITEM(strings, (Py_ssize_t)c, s);
    }
    result = Py_BuildValue("(OOOOn)", strings, types_b, ints_b, reals_b, (Py_ssize_t)n);
done:
    if (tab_ready) strtab_free(&tab);
    if (doc) yyjson_doc_free(doc);
    Py_XDECREF(strings);
    Py_XDECREF(types_b);
    Py_XDECREF(ints_b);
    Py_XDECREF(reals_b);
    PyBuffer_Release(&text);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, "A JSON array of trace events as columns (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastread", "Trace events as columns, parsed by yyjson " YYJSON_VERSION_STRING ".",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastread(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddStringConstant(m, "YYJSON_VERSION", YYJSON_VERSION_STRING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
