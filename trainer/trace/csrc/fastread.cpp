/* stepscope.trace._fastread: a piece of a trace's traceEvents array, parsed by simdjson, as columns.

    columns(text, event_keys, args_keys) -> None | (strings, types, ints, n)

``text``: any bytes-like object holding a JSON array of events (what jsonstream.TraceStream hands its decode
function). ``event_keys``: the keys read from each event, a tuple of bytes, the last of which is the object of
arguments (b"args"); ``args_keys``: the keys read from that object. Slot k is event_keys[k], then args_keys
after them. For n events and S slots, the result holds two S x n arrays, slot-major, as bytes:

    types  uint8   T_MISSING, T_NULL, T_INT, T_REAL, T_STR, T_TRUE, T_FALSE, T_ARRAY, T_OBJECT, T_OTHER
    ints   int64   the value of a T_INT; the index into ``strings`` of a T_STR; the bits of a T_REAL's
                   float64 (one word per value: half the memory written of a separate column of reals)

``strings``: the distinct string values met, as str, in order of first appearance. A key given twice in one
object takes its last value. T_OTHER: an integer above int64's range that fits in 64 bits unsigned.

None, rather than columns, for anything the caller's own decoder must judge: text that simdjson's validating
DOM parser does not read as one strict JSON array (RFC 8259: no NaN, no comments, valid UTF-8; also a number
that no 64-bit integer or double holds, nesting deeper than simdjson's limit, and a leading byte-order mark,
which simdjson would skip), an entry that is not an object, an ``args`` that is neither an object nor null, a
value nested more than MAX_DEPTH deep, or a string that is not valid for Python. The caller then decodes the
same text the slow way, which gives its result or its error. No Python object is made per event: only one per
distinct string.

    spans(text) -> None | (offsets, n)

Where each entry of a JSON array lies in ``text``, found by simdjson's On Demand iteration without decoding
any entry: ``offsets`` holds 2n int64 as bytes, the n entries' starts then their ends, so that entry k is
``text[starts[k]:ends[k]]`` (without the whitespace around it). On Demand checks the array's structure
(balanced brackets, closed strings, commas between entries, valid UTF-8, nothing after the array) but not
the atoms inside an entry, so ``spans`` is for text already read whole by a validating reader (the copy's
writer reads a file that its plan has read). None where the iteration meets an error: the caller decodes
the text itself, which gives its error (a cut inside a string or a nested value) or its entries.

    splice(text, offsets, values, codes) -> list

Some entries of ``text`` (a JSON array; the n entries at ``offsets``, 2n int64 as bytes, their starts then
their ends, as ``spans`` gives them) with members set, each rewritten where it lies: ``codes`` holds 4n int64
as bytes, per entry the index in ``values`` (a list of bytes, each a JSON text) of its new "name", "cat",
args' External id and args' "Call stack", -1 where that one is not set. Each value replaces the value of its
member, or is added at the end of its object (the entry's, or its args'), as setting a key of the decoded
dict would (args' "external id" is set where the entry has that key, else "External id"); the rest of the
entry is kept as its bytes. Each entry is read by simdjson's On Demand iteration, without decoding it. The
result holds, per entry, its new text, or None where it cannot be laid out (not an object, a key among these
given twice, an External id or a call stack to set where ``args`` is missing or not an object, an error met
on the way): its caller rewrites that one from its decoded value. Like ``spans``, for text a validating reader
has read.

    empty(n) -> bytearray

n bytes whose contents are not set (bytearray(n) zeroes them first), for a reader to fill with readinto.

    shared_ints(values) -> list

The int64s of ``values`` (bytes-like, native order) as a list of Python ints, equal to the array's tolist(),
a value met again taking the object already made for it: a column of few distinct values (a trace's
threads) is a list of a few objects, not one per row.

    open_frames(frame_thread, frame_start, frame_stop, frame_name, frame_real, op_thread, op_start)
        -> (op_chain, chain_parent, chain_name)

The Python frames open at each operator's start, on its thread, as the copy's call stacks need them (the sweep
of plugin_copy/stream_callstack.py, whose Python version is the reference). Frames: F int64 thread ids,
float64 starts and ends, int64 name ids (bytes-like, native order) and F bytes, 1 where the frame is a real
Python frame (kept in the stack), sorted by thread, then start, then latest end first; operators: O int64
thread ids and float64 starts, sorted by thread, then start. Each operator gets a chain: the real frames
enclosing it, as a node of a tree of chains (``chain_parent``, -1 at the outermost frame; ``chain_name``, that
frame's name id), equal chains one node; -1 where there is none. All three are returned as int64 bytes. The
GIL is released during the sweep.

    joined(text, seg_start, seg_end, news, lead) -> bytes

Segments joined by ",\n" (after one more ",\n" first where ``lead`` is true): n of them, given by two int64
arrays (bytes-like, native order): segment k is ``text[seg_start[k]:seg_end[k]]``, or, where seg_start[k] is
negative, ``news[-1 - seg_start[k]]`` (a list of bytes). The copy's writer joins a piece's stretches of the
original and its edited entries so. A bound outside the text or an index outside ``news`` is a ValueError.

    plan_rows(types, ints, n, slots, kind_of, step_cat, flags, x_code, i_code, base, long_us, max_time)
        -> None | (s_all, t_all, name, cat, rows)

One pass over a piece's columns as columns() made them (``types``, ``ints``: its S x n arrays; ``slots``: the
slots of name, cat, ph, ts and dur), for analysis/stream_columns.py's plan of the piece (trace/fastread.py's
plan_rows says what each argument and result is; analysis/stream_collect.py holds the per-event rules it
follows, and tests/reference/piece_plan.py the same rules in numpy, which the tests hold it to). None where a
check fails, for the caller to collect the piece event by event. ``kind_of``, ``step_cat`` and ``flags``
(int8, bytes of 0/1, int16) are indexed by a string's code, with one more entry for "none"; a code that falls
outside them is a ValueError, never a read past their end. The GIL is released during the pass.

Each thread keeps one simdjson parser (and its padded copy of the input), so that consecutive pieces reuse its
buffers instead of faulting in new ones; release() frees it once a trace has been read. Its buffers grow with
room for a quarter more, not to the exact size of a slightly larger piece, and the large buffers it makes (the
parser's, a piece's columns, empty()'s) ask for transparent huge pages before they are first written. A piece
that is a memoryview of a bytearray holding PADDING (simdjson's padding) more bytes after it is parsed where
it lies, without that copy: in_place(text) says whether a text is.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <algorithm>
#include <memory>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include "simdjson/simdjson.h"

using simdjson::dom::element;
using simdjson::dom::element_type;

enum { T_MISSING, T_NULL, T_INT, T_REAL, T_STR, T_TRUE, T_FALSE, T_ARRAY, T_OBJECT, T_OTHER };

#define MAX_SLOTS 64
#define MAX_DEPTH 200 /* below the nesting at which the Python decoders give up (about 500 to 1000) */
/* simdjson's own limit, so that no value is walked to check its depth: it refuses a piece in which a
   container lies PARSER_DEPTH or more levels below the array of events. An event is one level, so a value of
   an event that holds MAX_DEPTH nested containers is read, and one that holds more is left to the caller
   (within args, one level less) */
#define PARSER_DEPTH (MAX_DEPTH + 2)

typedef struct {
    const char *ptr;
    size_t len;
    uint64_t head; /* the key's first eight bytes (zeros past its end): most keys differ there */
} key_t_;

/* eight bytes of 0xff then eight of 0: the eight bytes from 8 - n on mask the first n bytes of a word, in
   memory order, whatever the machine's byte order */
static const unsigned char FIRST_BYTES[16] = {255, 255, 255, 255, 255, 255, 255, 255, 0, 0, 0, 0, 0, 0, 0, 0};

/* the first eight bytes of the n bytes at p, zeros past n; p must be readable for eight bytes, as every key
   simdjson hands out is (its string buffer holds a NUL after each string and is padded at its end) */
static inline uint64_t head_of(const char *p, size_t n) {
    uint64_t w, mask;
    memcpy(&w, p, 8);
    if (n >= 8) return w;
    memcpy(&mask, FIRST_BYTES + 8 - n, 8);
    return w & mask;
}

/* distinct strings: open addressing on (pointer, length) of the parser's string bytes */
typedef struct {
    const char **ptr;
    size_t *len;
    int64_t *slot; /* code + 1; 0: empty */
    size_t cap, count;
    const char **order_ptr;
    size_t *order_len;
} strtab;

/* p must be readable for eight bytes past its end rounded down to eight, as head_of's */
static inline uint64_t hash_bytes(const char *p, size_t n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL, w; /* eight bytes at a time */
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    h = (h ^ head_of(p, n)) * 0xc4ceb9fe1a85ec53ULL; /* the last 0 to 7 bytes */
    return h ^ (h >> 29);
}

static int strtab_init(strtab *t, size_t cap) {
    memset(t, 0, sizeof(*t));
    t->cap = cap;
    t->ptr = (const char **)PyMem_RawCalloc(cap, sizeof(char *));
    t->len = (size_t *)PyMem_RawCalloc(cap, sizeof(size_t));
    t->slot = (int64_t *)PyMem_RawCalloc(cap, sizeof(int64_t));
    t->order_ptr = (const char **)PyMem_RawCalloc(cap / 2 + 1, sizeof(char *));
    t->order_len = (size_t *)PyMem_RawCalloc(cap / 2 + 1, sizeof(size_t));
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
    memset(&bigger, 0, sizeof(bigger)); /* freed below even where strtab_init is not reached */
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

/* inlined where the compiler would make it a call: the walk below calls put() for every value it reads, and
   passing its six arguments cost a few percent of the walk (BENCHMARKS.md) */
#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* one value into slot (s, i); 0, or -1 for "let the caller decode it" / out of memory (*oom set) */
static ALWAYS_INLINE int put(element v, size_t at, uint8_t *types, int64_t *ints, strtab *tab, int *oom) {
    switch (v.type()) {
    case element_type::NULL_VALUE:
        types[at] = T_NULL;
        return 0;
    case element_type::BOOL:
        types[at] = v.get_bool().value_unsafe() ? T_TRUE : T_FALSE;
        return 0;
    case element_type::INT64:
        types[at] = T_INT;
        ints[at] = v.get_int64().value_unsafe();
        return 0;
    case element_type::UINT64: /* only above int64's range */
        types[at] = T_OTHER;
        return 0;
    case element_type::DOUBLE:
        types[at] = T_REAL;
        {
            double d = v.get_double().value_unsafe();
            memcpy(&ints[at], &d, sizeof(d));
        }
        return 0;
    case element_type::STRING: {
        std::string_view str = v.get_string().value_unsafe();
        int64_t code = strtab_code(tab, str.data(), str.size());
        if (code < 0) {
            *oom = 1;
            return -1;
        }
        types[at] = T_STR;
        ints[at] = code;
        return 0;
    }
    case element_type::ARRAY:
        types[at] = T_ARRAY;
        return 0;
    case element_type::OBJECT:
        types[at] = T_OBJECT;
        return 0;
    }
    return -1;
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
        keys[i].head = 0;
        memcpy(&keys[i].head, keys[i].ptr, keys[i].len < 8 ? keys[i].len : 8);
    }
    return 0;
}

/* The keys read, by bucket: a key is looked up once per value of every event, and most keys an event holds
   are not read, so a lookup is one hash and, for nearly all keys not read, one empty bucket. */
#define KEY_BUCKETS 256 /* a power of two, four times MAX_SLOTS */

typedef struct {
    const key_t_ *keys;
    int8_t slot[KEY_BUCKETS]; /* the index into keys; -1: empty */
} keymap;

static inline size_t key_bucket(uint64_t head, size_t n) {
    return (size_t)(((head ^ ((uint64_t)n << 56)) * 0x9E3779B97F4A7C15ULL) >> 56) & (KEY_BUCKETS - 1);
}

static int same_key(const key_t_ *k, uint64_t head, const char *p, size_t n) {
    return k->head == head && k->len == n && (n <= 8 || memcmp(k->ptr + 8, p + 8, n - 8) == 0);
}

/* a key given twice is found as its last */
static void keymap_build(keymap *m, const key_t_ *keys, Py_ssize_t count) {
    m->keys = keys;
    memset(m->slot, -1, sizeof(m->slot));
    for (Py_ssize_t k = 0; k < count; k++) {
        size_t j = key_bucket(keys[k].head, keys[k].len);
        while (m->slot[j] >= 0 && !same_key(&keys[m->slot[j]], keys[k].head, keys[k].ptr, keys[k].len))
            j = (j + 1) & (KEY_BUCKETS - 1);
        m->slot[j] = (int8_t)k;
    }
}

static inline Py_ssize_t find_key(const keymap *m, const char *p, size_t n) {
    const uint64_t head = head_of(p, n);
    for (size_t j = key_bucket(head, n);; j = (j + 1) & (KEY_BUCKETS - 1)) {
        const int k = m->slot[j];
        if (k < 0) return -1;
        if (same_key(&m->keys[k], head, p, n)) return k;
    }
}

/* Ask the kernel to back the 2 MiB-aligned pages inside [p, p + n) with huge pages (Linux's transparent huge
   pages, where they are set to "madvise"): a large output or input buffer is written once, from its start,
   and in 4 KiB pages each first write is a page fault of its own. A hint only: nothing changes where the
   kernel refuses it, or memory already touched stays as it is. */
static void huge_pages(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t start = ((uintptr_t)p + huge - 1) & ~(huge - 1), end = ((uintptr_t)p + n) & ~(huge - 1);
    if (end > start) (void)madvise((void *)start, (size_t)(end - start), MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

/* the thread's On Demand parser, for spans(): freed by release(), or when the thread ends */
static thread_local std::unique_ptr<simdjson::ondemand::parser> the_iterator;

/* the thread's parser: freed by release(), or when the thread ends */
static thread_local std::unique_ptr<simdjson::dom::parser> the_parser;

/* the thread's parser, made on first use; NULL when out of memory */
static simdjson::dom::parser *thread_parser(void) {
    if (!the_parser) {
        the_parser.reset(new (std::nothrow) simdjson::dom::parser());
        /* the depth is kept when the parser grows for a larger piece */
        if (the_parser && the_parser->allocate(simdjson::dom::MINIMAL_DOCUMENT_CAPACITY, PARSER_DEPTH))
            the_parser.reset();
    }
    return the_parser.get();
}

/* The capacity a parser grows to for a text of ``len`` bytes: a quarter more, so that pieces of about one
   size reuse its buffers instead of growing them at each slightly larger one (simdjson grows them to the
   exact size a text needs); at most ``most``. */
static size_t with_room(size_t len, size_t most) { return std::min(len + len / 4, most); }

/* The parser's buffers made ready for a text of ``len`` bytes (with_room; the text's own size where that
   cannot be had). New buffers are written from their start as a piece is parsed, so their pages are asked for
   as huge pages (huge_pages) before anything touches them. */
static simdjson::error_code grown(simdjson::dom::parser *parser, size_t len) {
    if ((parser->capacity() >= len && parser->doc.capacity() >= len) || len > parser->max_capacity())
        return simdjson::SUCCESS; /* the parse says CAPACITY for a text beyond what the parser holds */
    simdjson::error_code error = simdjson::MEMALLOC;
    size_t cap = 0;
    for (size_t want : {with_room(len, parser->max_capacity()), len}) {
        cap = want;
        error = parser->allocate(cap, PARSER_DEPTH);
        if (!error) error = parser->doc.allocate(cap);
        if (!error) break;
    }
    if (error) return error;
    huge_pages(parser->doc.tape.get(), SIMDJSON_ROUNDUP_N(cap + 3, 64) * sizeof(uint64_t));
    const size_t strings = SIMDJSON_ROUNDUP_N(5 * cap / 3 + simdjson::SIMDJSON_PADDING, 64);
    huge_pages(parser->doc.string_buf.get(), strings);
    return simdjson::SUCCESS;
}

/* release(): the calling thread's parser and its buffers (tens of MB for pieces of a few MB) freed, once a
   trace has been read; the next columns() makes a new one */
static PyObject *release(PyObject *self, PyObject *unused) {
    the_parser.reset();
    the_iterator.reset();
    Py_RETURN_NONE;
}

enum { READ_OK, READ_REFUSED, READ_OOM };

/* What a read that did not end READ_OK leaves the caller: MemoryError (READ_OOM), or None (READ_REFUSED: the
   caller's own decoder judges the text). Whether the call ends there. */
static int settled(int outcome, PyObject **result) {
    if (outcome == READ_OOM) {
        PyErr_NoMemory();
        return 1;
    }
    if (outcome == READ_REFUSED) {
        *result = Py_NewRef(Py_None);
        return 1;
    }
    return 0;
}

/* the events of `root` into the columns (all set to T_MISSING); READ_REFUSED: let the caller decode it */
static int read_events(simdjson::dom::array root, size_t n, const key_t_ *keys, Py_ssize_t n_event,
                       Py_ssize_t n_args, uint8_t *types, int64_t *ints, strtab *tab) {
    const Py_ssize_t args_slot = n_event - 1, slots = n_event + n_args;
    keymap event_map, args_map;
    keymap_build(&event_map, keys, n_event);
    keymap_build(&args_map, keys + n_event, n_args);
    int oom = 0;
    size_t i = 0;
    for (element event : root) {
        if (event.type() != element_type::OBJECT) return READ_REFUSED;
        bool args_seen = false; /* the args slots are all T_MISSING until the event's first "args" */
        for (simdjson::dom::key_value_pair kv : simdjson::dom::object(event.get_object().value_unsafe())) {
            element v = kv.value;
            Py_ssize_t s = find_key(&event_map, kv.key.data(), kv.key.size());
            if (s == args_slot) {
                /* a later "args" replaces an earlier one: forget what that one gave */
                if (args_seen)
                    for (Py_ssize_t a = n_event; a < slots; a++) types[(size_t)a * n + i] = T_MISSING;
                args_seen = true;
                element_type t = v.type();
                if (t == element_type::NULL_VALUE) {
                    types[(size_t)s * n + i] = T_NULL;
                    continue;
                }
                if (t != element_type::OBJECT) return READ_REFUSED;
                types[(size_t)s * n + i] = T_OBJECT;
                for (simdjson::dom::key_value_pair akv : simdjson::dom::object(v.get_object().value_unsafe())) {
                    Py_ssize_t a = find_key(&args_map, akv.key.data(), akv.key.size());
                    if (a < 0) continue;
                    if (put(akv.value, (size_t)(n_event + a) * n + i, types, ints, tab, &oom) < 0)
                        return oom ? READ_OOM : READ_REFUSED;
                }
            } else if (s >= 0) {
                if (put(v, (size_t)s * n + i, types, ints, tab, &oom) < 0) return oom ? READ_OOM : READ_REFUSED;
            }
        }
        i++;
    }
    return READ_OK;
}

/* whether simdjson may read SIMDJSON_PADDING bytes past the n bytes at p, which a Py_buffer of `obj`
   holds: true where `obj` is a memoryview of part of a bytearray that holds them (jsonstream.py leaves them
   after each piece it cuts), so that the piece is parsed where it lies instead of being copied first. The
   buffer export held on `obj` keeps the bytearray from being resized meanwhile. */
static int padded_in_place(PyObject *obj, const char *p, Py_ssize_t n) {
    if (obj == NULL || !PyMemoryView_Check(obj)) return 0;
    PyObject *base = PyMemoryView_GET_BASE(obj);
    if (base == NULL || !PyByteArray_Check(base)) return 0;
    const char *start = PyByteArray_AS_STRING(base);
    const size_t size = (size_t)PyByteArray_GET_SIZE(base);
    return p >= start && (size_t)(p - start) <= size && (size_t)n + simdjson::SIMDJSON_PADDING <= size - (size_t)(p - start);
}

/* in_place(text): whether columns() parses `text` where it lies (padded_in_place), for the tests */
static PyObject *in_place(PyObject *self, PyObject *arg) {
    Py_buffer text;
    if (PyObject_GetBuffer(arg, &text, PyBUF_SIMPLE) < 0) return NULL;
    int yes = padded_in_place(text.obj, (const char *)text.buf, text.len);
    PyBuffer_Release(&text);
    return PyBool_FromLong(yes);
}

static PyObject *columns(PyObject *self, PyObject *args) {
    Py_buffer text;
    PyObject *event_seq, *args_seq;
    key_t_ keys[MAX_SLOTS];
    Py_ssize_t n_event = 0, n_args = 0;
    if (!PyArg_ParseTuple(args, "y*O!O!", &text, &PyTuple_Type, &event_seq, &PyTuple_Type, &args_seq))
        return NULL;
    PyObject *result = NULL, *strings = NULL, *types_b = NULL, *ints_b = NULL;
    strtab tab;
    int tab_ready = 0, outcome = READ_OK, in_place_ok = 0;
    simdjson::error_code error = simdjson::SUCCESS;
    simdjson::dom::array root;
    simdjson::dom::parser *parser = NULL;
    size_t n = 0;
    Py_ssize_t slots = 0;
    uint8_t *types = NULL;
    int64_t *ints = NULL;
    const char *bytes = (const char *)text.buf;
    if (read_keys(event_seq, keys, &n_event, MAX_SLOTS) < 0 ||
        read_keys(args_seq, keys + n_event, &n_args, MAX_SLOTS - n_event) < 0)
        goto done;
    if (n_event < 1) {
        PyErr_SetString(PyExc_ValueError, "event_keys must end with the key of the arguments");
        goto done;
    }
    slots = n_event + n_args;
    if (text.len >= 3 && memcmp(bytes, "\xEF\xBB\xBF", 3) == 0) { /* simdjson skips a byte-order mark */
        result = Py_NewRef(Py_None);
        goto done;
    }
    parser = thread_parser();
    if (parser == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    in_place_ok = padded_in_place(text.obj, bytes, text.len);
    Py_BEGIN_ALLOW_THREADS
    element doc;
    error = grown(parser, (size_t)text.len);
    if (!error) error = parser->parse(bytes, (size_t)text.len, !in_place_ok).get(doc);
    if (!error) error = doc.get_array().get(root);
    Py_END_ALLOW_THREADS
    if (error == simdjson::MEMALLOC) {
        PyErr_NoMemory();
        goto done;
    }
    if (error) { /* not strict JSON, not an array, or beyond what simdjson holds: the caller's decoder says */
        result = Py_NewRef(Py_None);
        goto done;
    }
    n = root.size();
    if (n > (size_t)PY_SSIZE_T_MAX / 32 / (size_t)(slots ? slots : 1)) {
        PyErr_NoMemory();
        goto done;
    }
    types_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * slots));
    ints_b = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * slots * sizeof(int64_t)));
    if (!types_b || !ints_b) goto done;
    types = (uint8_t *)PyBytes_AS_STRING(types_b);
    ints = (int64_t *)PyBytes_AS_STRING(ints_b);
    huge_pages(types, n * slots);
    huge_pages(ints, n * slots * sizeof(int64_t));
    memset(types, T_MISSING, n * slots);
    memset(ints, 0, n * slots * sizeof(int64_t));
    if (strtab_init(&tab, 1024) < 0) {
        tab_ready = 1;
        PyErr_NoMemory();
        goto done;
    }
    tab_ready = 1;
    Py_BEGIN_ALLOW_THREADS
    outcome = read_events(root, n, keys, n_event, n_args, types, ints, &tab);
    Py_END_ALLOW_THREADS
    if (settled(outcome, &result)) goto done;
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
    result = Py_BuildValue("(OOOn)", strings, types_b, ints_b, (Py_ssize_t)n);
done:
    if (tab_ready) strtab_free(&tab);
    Py_XDECREF(strings);
    Py_XDECREF(types_b);
    Py_XDECREF(ints_b);
    PyBuffer_Release(&text);
    return result;
}


/* the calling thread's On Demand parser, made on first use; NULL (MemoryError set) when out of memory */
static simdjson::ondemand::parser *thread_iterator(void) {
    if (!the_iterator) {
        the_iterator.reset(new (std::nothrow) simdjson::ondemand::parser());
        if (!the_iterator) PyErr_NoMemory();
    }
    return the_iterator.get();
}

/* where the `len` bytes at `bytes` (a buffer of `obj`) can be read with simdjson's padding after them: where
   they lie (padded_in_place), else a padded copy made in *copy; -1 (MemoryError set) when out of memory */
static int padded(PyObject *obj, const char *bytes, size_t len, simdjson::padded_string *copy,
                  const char **base) {
    if (padded_in_place(obj, bytes, (Py_ssize_t)len)) {
        *base = bytes;
        return 0;
    }
    *copy = simdjson::padded_string(bytes, len);
    if (len && copy->data() == nullptr) {
        PyErr_NoMemory();
        return -1;
    }
    *base = copy->data();
    return 0;
}

static inline int is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* the entries of the array in `view` into a growing buffer of (start, end) pairs; READ_REFUSED on any
   error of the iteration, READ_OOM when the buffer cannot grow. Runs without the GIL. */
static int entry_spans(simdjson::ondemand::parser *parser, simdjson::padded_string_view view,
                       const char *base, int64_t **pairs, size_t *cap, size_t *n) {
    simdjson::ondemand::document doc;
    simdjson::ondemand::array array;
    const size_t whole = view.length();
    if (parser->capacity() < whole && whole <= parser->max_capacity()) {
        /* with_room, as grown() gives the DOM parser; where that cannot be had, iterate() allocates the
           text's own size, or says it cannot */
        const size_t room = with_room(whole, parser->max_capacity());
        simdjson::error_code grew = parser->allocate(room, parser->max_depth());
        (void)grew;
    }
    if (parser->iterate(view).get(doc) || doc.get_array().get(array)) return READ_REFUSED;
    for (auto entry : array) {
        simdjson::ondemand::value value;
        std::string_view raw;
        if (entry.get(value) || value.raw_json().get(raw)) return READ_REFUSED;
        size_t len = raw.size();
        while (len && is_space(raw[len - 1])) len--; /* a scalar's token holds the spaces after it */
        if (*n == *cap) {
            size_t bigger = *cap ? *cap * 2 : 4096;
            int64_t *grown = (int64_t *)PyMem_RawRealloc(*pairs, bigger * 2 * sizeof(int64_t));
            if (grown == NULL) return READ_OOM;
            *pairs = grown;
            *cap = bigger;
        }
        (*pairs)[2 * *n] = raw.data() - base;
        (*pairs)[2 * *n + 1] = raw.data() - base + (int64_t)len;
        (*n)++;
    }
    /* an error of the array's structure is met as an entry (above); what follows the array is checked here */
    return doc.at_end() ? READ_OK : READ_REFUSED;
}

/* spans(text): see the module comment */
static PyObject *spans(PyObject *self, PyObject *arg) {
    Py_buffer text;
    if (PyObject_GetBuffer(arg, &text, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    const char *bytes = (const char *)text.buf;
    const size_t len = (size_t)text.len;
    int64_t *pairs = NULL;
    size_t cap = 0, n = 0;
    int outcome = READ_OK;
    simdjson::padded_string copy;
    simdjson::padded_string_view view;
    simdjson::ondemand::parser *parser;
    const char *base;
    if (len >= 3 && memcmp(bytes, "\xEF\xBB\xBF", 3) == 0) { /* simdjson skips a byte-order mark */
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (!(parser = thread_iterator()) || padded(text.obj, bytes, len, &copy, &base) < 0) goto done;
    view = simdjson::padded_string_view(base, len, len + simdjson::SIMDJSON_PADDING);
    Py_BEGIN_ALLOW_THREADS
    outcome = entry_spans(parser, view, view.data(), &pairs, &cap, &n);
    Py_END_ALLOW_THREADS
    if (settled(outcome, &result)) goto done;
    {
        PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(2 * n * sizeof(int64_t)));
        if (!offsets) goto done;
        int64_t *out = (int64_t *)PyBytes_AS_STRING(offsets);
        for (size_t k = 0; k < n; k++) {
            out[k] = pairs[2 * k];
            out[n + k] = pairs[2 * k + 1];
        }
        result = Py_BuildValue("(Nn)", offsets, (Py_ssize_t)n);
    }
done:
    PyMem_RawFree(pairs);
    PyBuffer_Release(&text);
    return result;
}

/* an entry's layout: whether it was laid out; its closing brace and whether it has no member; the
   [start, end) of the values of its "cat", "name" and "args" (-1, -1 where absent); whether "args" has no
   member (-1: no args, or args that is no object); the [start, end) of the values of args' "Call stack",
   "External id" and "external id" */
enum {
    M_OK, M_CLOSE, M_EMPTY, M_CAT, M_NAME = M_CAT + 2, M_ARGS = M_NAME + 2, M_ARGS_EMPTY = M_ARGS + 2,
    M_STACK, M_EXT = M_STACK + 2, M_EXT_LOWER = M_EXT + 2, M_FIELDS = M_EXT_LOWER + 2
};

/* the object at [s, e) of `base` (which holds `cap` bytes from base, padding included): the [start, end) of
   the values of its members named keys[k] into out[slots[k]], out[slots[k] + 1]; whether it has no member
   into *empty. 0 when it cannot be laid out (module comment). Runs without the GIL. */
static int lay_out_object(simdjson::ondemand::parser *parser, const char *base, size_t cap, int64_t s,
                          int64_t e, const std::string_view *keys, const int *slots, int n_keys, int64_t *out,
                          int64_t *empty) {
    if (s < 0 || e <= s || (size_t)e + simdjson::SIMDJSON_PADDING > cap) return 0;
    simdjson::padded_string_view view(base + s, (size_t)(e - s), cap - (size_t)s);
    simdjson::ondemand::document doc;
    simdjson::ondemand::object obj;
    if (parser->iterate(view).get(doc) || doc.get_object().get(obj)) return 0;
    *empty = 1;
    for (auto field : obj) {
        std::string_view key, raw;
        simdjson::ondemand::value value;
        if (field.error() || field.unescaped_key().get(key) || field.value().get(value) ||
            value.raw_json().get(raw))
            return 0;
        *empty = 0;
        for (int k = 0; k < n_keys; k++) {
            if (key != keys[k]) continue;
            if (out[slots[k]] >= 0) return 0; /* given twice: the decoded value is the judge */
            size_t len = raw.size();
            while (len && is_space(raw[len - 1])) len--;
            out[slots[k]] = raw.data() - base;
            out[slots[k] + 1] = raw.data() - base + (int64_t)len;
        }
    }
    return doc.at_end();
}

static const std::string_view EVENT_KEYS[] = {"cat", "name", "args"};
static const int EVENT_SLOTS[] = {M_CAT, M_NAME, M_ARGS};
static const std::string_view ARGS_KEYS[] = {"Call stack", "External id", "external id"};
static const int ARGS_SLOTS[] = {M_STACK, M_EXT, M_EXT_LOWER};

/* the layout of the entry at [s, e) into out[M_FIELDS] (out[M_OK] 0: it has none). Runs without the GIL. */
static void lay_out(simdjson::ondemand::parser *parser, const char *base, size_t cap, int64_t s, int64_t e,
                    int64_t *out) {
    for (int k = 0; k < M_FIELDS; k++) out[k] = -1;
    out[M_OK] = 0;
    if (!lay_out_object(parser, base, cap, s, e, EVENT_KEYS, EVENT_SLOTS, 3, out, &out[M_EMPTY])) return;
    if (base[e - 1] != '}') return;
    out[M_CLOSE] = e - 1;
    if (out[M_ARGS] >= 0 && base[out[M_ARGS]] == '{') { /* else M_ARGS_EMPTY stays -1: args is no object */
        const int64_t a = out[M_ARGS], b = out[M_ARGS + 1];
        if (base[b - 1] != '}') return;
        if (!lay_out_object(parser, base, cap, a, b, ARGS_KEYS, ARGS_SLOTS, 3, out, &out[M_ARGS_EMPTY])) return;
    }
    out[M_OK] = 1;
}

typedef struct {
    int64_t from, to; /* the bytes [from, to) of the entry replaced by ... */
    const char *put;  /* ... the `len` bytes at put, after a comma where `comma` */
    Py_ssize_t len;
    int comma;
    const char *key; /* a member added: its key, written before the value (NULL: a value replaced) */
} cut_t;

/* the new text of the entry at [s, e) with layout `at` and the values `v` (name, cat, External id, call
   stack; NULL where not set), or None where it cannot be made here (module comment). Holds the GIL. */
static PyObject *spliced(const char *base, int64_t s, int64_t e, const int64_t *at, PyObject *const *v) {
    cut_t cuts[8];
    int n = 0, added_last = 0, added_args = 0;
    if (!at[M_OK]) Py_RETURN_NONE;
    static const int TOP_SLOTS[2] = {M_NAME, M_CAT};
    static const char *TOP_KEYS[2] = {"\"name\":", "\"cat\":"};
    for (int k = 0; k < 2; k++) {
        if (v[k] == NULL) continue;
        const int slot = TOP_SLOTS[k];
        if (at[slot] >= 0) {
            cuts[n++] = {at[slot], at[slot + 1], PyBytes_AS_STRING(v[k]), PyBytes_GET_SIZE(v[k]), 0, NULL};
        } else {
            cuts[n++] = {at[M_CLOSE], at[M_CLOSE], PyBytes_AS_STRING(v[k]), PyBytes_GET_SIZE(v[k]),
                         !at[M_EMPTY] || added_last, TOP_KEYS[k]};
            added_last = 1;
        }
    }
    if (v[2] != NULL || v[3] != NULL) {
        if (at[M_ARGS_EMPTY] < 0) Py_RETURN_NONE; /* no args, or args that is no object */
        const int64_t close = at[M_ARGS + 1] - 1;
        if (v[2] != NULL) {
            const int slot = at[M_EXT_LOWER] >= 0 ? M_EXT_LOWER : M_EXT;
            if (at[slot] >= 0) {
                cuts[n++] = {at[slot], at[slot + 1], PyBytes_AS_STRING(v[2]), PyBytes_GET_SIZE(v[2]), 0, NULL};
            } else {
                cuts[n++] = {close, close, PyBytes_AS_STRING(v[2]), PyBytes_GET_SIZE(v[2]),
                             !at[M_ARGS_EMPTY] || added_args, "\"External id\":"};
                added_args = 1;
            }
        }
        if (v[3] != NULL) {
            if (at[M_STACK] >= 0) {
                cuts[n++] = {at[M_STACK], at[M_STACK + 1], PyBytes_AS_STRING(v[3]), PyBytes_GET_SIZE(v[3]), 0,
                             NULL};
            } else {
                cuts[n++] = {close, close, PyBytes_AS_STRING(v[3]), PyBytes_GET_SIZE(v[3]),
                             !at[M_ARGS_EMPTY] || added_args, "\"Call stack\":"};
                added_args = 1;
            }
        }
    }
    /* in the entry's order (insertion sort of a few; cuts at one place keep the order they were made in) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && cuts[j - 1].from > cuts[j].from; j--) {
            cut_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    Py_ssize_t size = 0;
    int64_t here = s;
    for (int i = 0; i < n; i++) {
        size += (Py_ssize_t)(cuts[i].from - here) + cuts[i].comma + cuts[i].len +
                (cuts[i].key ? (Py_ssize_t)strlen(cuts[i].key) : 0);
        here = cuts[i].to;
    }
    size += (Py_ssize_t)(e - here);
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (!out) return NULL;
    char *w = PyBytes_AS_STRING(out);
    here = s;
    for (int i = 0; i < n; i++) {
        memcpy(w, base + here, (size_t)(cuts[i].from - here));
        w += cuts[i].from - here;
        if (cuts[i].comma) *w++ = ',';
        if (cuts[i].key) {
            const size_t k = strlen(cuts[i].key);
            memcpy(w, cuts[i].key, k);
            w += k;
        }
        memcpy(w, cuts[i].put, (size_t)cuts[i].len);
        w += cuts[i].len;
        here = cuts[i].to;
    }
    memcpy(w, base + here, (size_t)(e - here));
    return out;
}

/* splice(text, offsets, values, codes): see the module comment */
static PyObject *splice(PyObject *self, PyObject *args) {
    Py_buffer text, where, codes;
    PyObject *listed;
    if (!PyArg_ParseTuple(args, "y*y*O!y*", &text, &where, &PyList_Type, &listed, &codes)) return NULL;
    /* a tuple of them: the GIL is released while the entries are laid out, and a tuple cannot change */
    PyObject *values = PyList_AsTuple(listed);
    PyObject *result = NULL;
    const char *bytes = (const char *)text.buf;
    const size_t len = (size_t)text.len;
    const size_t n = (size_t)where.len / (2 * sizeof(int64_t));
    const int64_t *starts = (const int64_t *)where.buf, *ends = starts + n, *code = (const int64_t *)codes.buf;
    const Py_ssize_t n_values = values ? PyTuple_GET_SIZE(values) : 0;
    int64_t *layout = NULL;
    simdjson::padded_string copy;
    simdjson::ondemand::parser *parser;
    const char *base;
    if (!values) goto done;
    if (where.len % (Py_ssize_t)(2 * sizeof(int64_t)) || codes.len != (Py_ssize_t)(4 * n * sizeof(int64_t))) {
        PyErr_SetString(PyExc_ValueError, "splice: offsets and codes do not hold n entries");
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        if (starts[k] < 0 || ends[k] < starts[k] || (size_t)ends[k] > len) {
            PyErr_SetString(PyExc_ValueError, "splice: an entry outside the text");
            goto done;
        }
        for (int f = 0; f < 4; f++) {
            const int64_t c = code[4 * k + f];
            if (c < -1 || c >= n_values || (c >= 0 && !PyBytes_Check(PyTuple_GET_ITEM(values, c)))) {
                PyErr_SetString(PyExc_ValueError, "splice: a code that names no bytes in values");
                goto done;
            }
        }
    }
    if (!(parser = thread_iterator()) || padded(text.obj, bytes, len, &copy, &base) < 0) goto done;
    layout = (int64_t *)PyMem_RawMalloc((n ? n : 1) * M_FIELDS * sizeof(int64_t));
    if (!layout) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (size_t k = 0; k < n; k++)
        lay_out(parser, base, len + simdjson::SIMDJSON_PADDING, starts[k], ends[k], layout + k * M_FIELDS);
    Py_END_ALLOW_THREADS
    result = PyList_New((Py_ssize_t)n);
    if (!result) goto done;
    for (size_t k = 0; k < n; k++) {
        PyObject *v[4];
        for (int f = 0; f < 4; f++) {
            const int64_t c = code[4 * k + f];
            v[f] = c >= 0 ? PyTuple_GET_ITEM(values, c) : NULL;
        }
        PyObject *entry = spliced(base, starts[k], ends[k], layout + k * M_FIELDS, v);
        if (!entry) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)k, entry);
    }
done:
    Py_XDECREF(values);
    PyMem_RawFree(layout);
    PyBuffer_Release(&codes);
    PyBuffer_Release(&where);
    PyBuffer_Release(&text);
    return result;
}

/* shared_ints(values): a list of the int64s in `values` (a bytes-like object of native int64s) as Python
   ints, a value met again taking the object made for it before (a small cache keyed by the value) instead of
   a new one: a column of few distinct values, such as a trace's threads, becomes a list of a few objects,
   which cost nothing to make or to free. Equal to the array's tolist(). */
#define SHARED_SLOTS 64 /* a power of two */

static PyObject *shared_ints(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *list = NULL, *objs[SHARED_SLOTS] = {NULL};
    int64_t keys[SHARED_SLOTS];
    const Py_ssize_t n = b.len / (Py_ssize_t)sizeof(int64_t);
    if (b.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "not a whole number of int64s");
        goto done;
    }
    list = PyList_New(n);
    if (!list) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x;
        memcpy(&x, (const char *)b.buf + i * (Py_ssize_t)sizeof(int64_t), sizeof(x));
        const size_t h = (size_t)(((uint64_t)x * 0x9E3779B97F4A7C15ULL) >> 58) & (SHARED_SLOTS - 1);
        if (objs[h] == NULL || keys[h] != x) {
            PyObject *o = PyLong_FromLongLong((long long)x);
            if (!o) {
                Py_CLEAR(list);
                goto done;
            }
            Py_XSETREF(objs[h], o); /* the cache's reference */
            keys[h] = x;
        }
        PyList_SET_ITEM(list, i, Py_NewRef(objs[h]));
    }
done:
    for (size_t h = 0; h < SHARED_SLOTS; h++) Py_XDECREF(objs[h]);
    PyBuffer_Release(&b);
    return list;
}

/* empty(n): a bytearray of n bytes whose contents are not set, for a reader to fill (readinto) without the
   pass that bytearray(n) makes to zero it first */
static PyObject *empty(PyObject *self, PyObject *arg) {
    Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative size");
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n);
    if (out) huge_pages(PyByteArray_AS_STRING(out), (size_t)n);
    return out;
}

/* open_frames: see the top of this file. The sweep keeps, per open frame, its end, its chain (the real frames
   from the outermost down to it) and the earliest end among the frames from the outermost down to it, so
   that an operator under frames that are all still open takes the chain of the innermost one; an operator
   below a frame that ended before it (frames that do not nest) gets the chain of the open frames that still
   enclose it, made afresh. */
typedef struct {
    double end, earliest;
    int64_t chain, name;
    uint8_t real;
} open_frame;

struct chain_key {
    int64_t parent, name;
    bool operator==(const chain_key &o) const { return parent == o.parent && name == o.name; }
};

struct chain_hash {
    size_t operator()(const chain_key &k) const {
        return (size_t)(((uint64_t)k.parent * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)k.name);
    }
};

struct chains {
    std::unordered_map<chain_key, int64_t, chain_hash> made;
    std::vector<int64_t> parent, name;

    int64_t child(int64_t p, int64_t n) {
        auto found = made.emplace(chain_key{p, n}, (int64_t)parent.size());
        if (found.second) {
            parent.push_back(p);
            name.push_back(n);
        }
        return found.first->second;
    }
};

static void sweep(Py_ssize_t nf, const int64_t *f_thread, const double *f_start, const double *f_stop,
                  const int64_t *f_name, const uint8_t *f_real, Py_ssize_t no, const int64_t *o_thread,
                  const double *o_start, int64_t *o_chain, chains *tree) {
    std::vector<open_frame> open;
    Py_ssize_t f = 0, o = 0;
    while (o < no) {
        const int64_t thread = o_thread[o];
        while (f < nf && f_thread[f] < thread) f++;
        Py_ssize_t next = f, end = f;
        while (end < nf && f_thread[end] == thread) end++;
        open.clear();
        for (; o < no && o_thread[o] == thread; o++) {
            const double at = o_start[o];
            for (; next < end && f_start[next] <= at; next++) {
                while (!open.empty() && open.back().end < f_start[next]) open.pop_back();
                const int64_t below = open.empty() ? -1 : open.back().chain;
                const int64_t chain = f_real[next] ? tree->child(below, f_name[next]) : below;
                const double earliest = open.empty() ? f_stop[next] : std::min(open.back().earliest, f_stop[next]);
                open.push_back(open_frame{f_stop[next], earliest, chain, f_name[next], f_real[next]});
            }
            while (!open.empty() && open.back().end < at) open.pop_back();
            if (open.empty() || open.back().earliest >= at) {
                o_chain[o] = open.empty() ? -1 : open.back().chain;
                continue;
            }
            int64_t chain = -1; /* frames that ended before the operator stay below an open one: left out */
            for (const open_frame &fr : open)
                if (fr.end >= at && fr.real) chain = tree->child(chain, fr.name);
            o_chain[o] = chain;
        }
        f = end;
    }
}

static PyObject *int64_bytes(const std::vector<int64_t> &v) {
    return PyBytes_FromStringAndSize((const char *)v.data(), (Py_ssize_t)(v.size() * sizeof(int64_t)));
}

static PyObject *open_frames(PyObject *self, PyObject *args) {
    Py_buffer b[7];
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6])) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t nf = b[0].len / 8, no = b[5].len / 8;
    if (b[0].len % 8 || b[1].len != nf * 8 || b[2].len != nf * 8 || b[3].len != nf * 8 || b[4].len != nf ||
        b[5].len % 8 || b[6].len != no * 8) {
        PyErr_SetString(PyExc_ValueError, "frames and operators of different lengths");
    } else {
        std::vector<int64_t> chain;
        chains tree;
        int oom = 0;
        Py_BEGIN_ALLOW_THREADS
        try {
            chain.resize((size_t)no);
            sweep(nf, (const int64_t *)b[0].buf, (const double *)b[1].buf, (const double *)b[2].buf,
                  (const int64_t *)b[3].buf, (const uint8_t *)b[4].buf, no, (const int64_t *)b[5].buf,
                  (const double *)b[6].buf, chain.data(), &tree);
        } catch (const std::bad_alloc &) {
            oom = 1;
        }
        Py_END_ALLOW_THREADS
        if (oom) {
            PyErr_NoMemory();
        } else {
            PyObject *a = int64_bytes(chain), *p = int64_bytes(tree.parent), *n = int64_bytes(tree.name);
            if (a && p && n) result = PyTuple_Pack(3, a, p, n);
            Py_XDECREF(a);
            Py_XDECREF(p);
            Py_XDECREF(n);
        }
    }
    for (int k = 0; k < 7; k++) PyBuffer_Release(&b[k]);
    return result;
}

/* joined: see the top of this file. The sizes are summed and the bounds checked first, holding the GIL (the
   list's items are read there); the bytes are then copied without it, into the one result. */
static PyObject *joined(PyObject *self, PyObject *args) {
    Py_buffer text, b_start, b_end;
    PyObject *news;
    int lead;
    if (!PyArg_ParseTuple(args, "y*y*y*O!p", &text, &b_start, &b_end, &PyList_Type, &news, &lead)) return NULL;
    PyObject *result = NULL;
    const Py_ssize_t n = b_start.len / 8, count = PyList_GET_SIZE(news);
    const int64_t *seg_start = (const int64_t *)b_start.buf, *seg_end = (const int64_t *)b_end.buf;
    std::vector<std::pair<const char *, Py_ssize_t>> parts;
    Py_ssize_t total = (lead && n) ? 2 : 0;
    if (b_start.len % 8 || b_end.len != b_start.len) {
        PyErr_SetString(PyExc_ValueError, "starts and ends of different lengths");
        goto done;
    }
    try {
        parts.reserve((size_t)n);
    } catch (const std::bad_alloc &) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        const int64_t a = seg_start[k], b = seg_end[k];
        if (a < 0) {
            const int64_t i = -1 - a;
            PyObject *item = i < count ? PyList_GET_ITEM(news, i) : NULL;
            if (item == NULL || !PyBytes_Check(item)) {
                PyErr_SetString(PyExc_ValueError, "a segment's new text is missing or not bytes");
                goto done;
            }
            parts.emplace_back(PyBytes_AS_STRING(item), PyBytes_GET_SIZE(item));
        } else {
            if (b < a || b > (int64_t)text.len) {
                PyErr_SetString(PyExc_ValueError, "a segment outside the text");
                goto done;
            }
            parts.emplace_back((const char *)text.buf + a, (Py_ssize_t)(b - a));
        }
        total += parts.back().second + (k ? 2 : 0);
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result) {
        char *out = PyBytes_AS_STRING(result);
        huge_pages(out, (size_t)total);
        Py_BEGIN_ALLOW_THREADS
        if (lead && n) {
            memcpy(out, ",\n", 2);
            out += 2;
        }
        for (size_t k = 0; k < parts.size(); k++) {
            if (k) {
                memcpy(out, ",\n", 2);
                out += 2;
            }
            memcpy(out, parts[k].first, (size_t)parts[k].second);
            out += parts[k].second;
        }
        Py_END_ALLOW_THREADS
    }
done:
    PyBuffer_Release(&text);
    PyBuffer_Release(&b_start);
    PyBuffer_Release(&b_end);
    return result;
}

/* plan_rows: see the top of this file. One pass over a piece's events in the columns that columns() made:
   the checks that decide whether the piece can be collected from its columns, each event's times, name and
   category codes, and the rows of each kind of event, in order. */
enum { R_STEPS, R_MEMORY, R_CALLS, R_BUILTINS, R_LONG, R_MODEL, R_MODULE, R_DEVICE, R_RUNTIME, R_DATA, R_OPS,
       R_ANNOTATIONS, R_LISTS };
enum { K_PYTHON, K_DEVICE, K_RUNTIME, K_OP, K_ANNOTATION, K_OTHER }; /* stream_collect's _K_* */
enum { F_STEP = 1, F_BUILTIN = 2, F_DATALOADER = 4, F_MODEL = 8, F_DATA = 16, F_MEMORY = 32, F_MODULE = 64 };

static inline double real_of(uint8_t t, int64_t v) {
    if (t == T_REAL) {
        double d;
        memcpy(&d, &v, sizeof(d));
        return d;
    }
    return t == T_INT ? (double)v : 0.0;
}

static inline int timed(uint8_t t) { return t == T_INT || t == T_REAL; }

/* a time's column: a number, null or missing; a number within [-max_time, max_time], an integer also within
   2**53 of 0 (beyond it, msgspec's own path compares it exactly) */
static inline int time_ok(uint8_t t, int64_t v, double r, double max_time) {
    if (!(timed(t) || t == T_MISSING || t == T_NULL)) return 0;
    if (!(-max_time <= r && r <= max_time)) return 0;
    return t != T_INT || (v >= -(INT64_C(1) << 53) && v <= (INT64_C(1) << 53));
}

static PyObject *plan_rows(PyObject *self, PyObject *args) {
    Py_buffer types_b, ints_b, kind_b, step_b, flags_b;
    Py_ssize_t n, s_name, s_cat, s_ph, s_ts, s_dur;
    long long x_code, i_code;
    double base, long_us, max_time;
    if (!PyArg_ParseTuple(args, "y*y*n(nnnnn)y*y*y*LLddd", &types_b, &ints_b, &n, &s_name, &s_cat, &s_ph, &s_ts,
                          &s_dur, &kind_b, &step_b, &flags_b, &x_code, &i_code, &base, &long_us, &max_time))
        return NULL;
    PyObject *result = NULL;
    std::vector<int64_t> rows[R_LISTS];
    PyObject *s_all = NULL, *t_all = NULL, *name_out = NULL, *cat_out = NULL, *lists = NULL;
    const Py_ssize_t m = kind_b.len - 1;
    const Py_ssize_t slots = n > 0 ? types_b.len / n : 0;
    int refused = 0;
    if (n < 0 || m < 0 || step_b.len != m + 1 || flags_b.len != 2 * (m + 1) || (n > 0 && types_b.len % n) ||
        ints_b.len != types_b.len * (Py_ssize_t)sizeof(int64_t) || s_name < 0 || s_cat < 0 || s_ph < 0 ||
        s_ts < 0 || s_dur < 0 || (n > 0 && (s_name >= slots || s_cat >= slots || s_ph >= slots ||
                                            s_ts >= slots || s_dur >= slots))) {
        PyErr_SetString(PyExc_ValueError, "plan_rows: columns, slots or tables of the wrong size");
        goto done;
    }
    s_all = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    t_all = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(double));
    name_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    cat_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!s_all || !t_all || !name_out || !cat_out) goto done;
    {
        const uint8_t *types = (const uint8_t *)types_b.buf;
        const int64_t *ints = (const int64_t *)ints_b.buf;
        const int8_t *kind_of = (const int8_t *)kind_b.buf;
        const uint8_t *step_cat = (const uint8_t *)step_b.buf;
        const int16_t *flags = (const int16_t *)flags_b.buf;
        double *s_out = (double *)PyBytes_AS_STRING(s_all), *t_out = (double *)PyBytes_AS_STRING(t_all);
        int64_t *name_codes = (int64_t *)PyBytes_AS_STRING(name_out);
        int64_t *cat_codes = (int64_t *)PyBytes_AS_STRING(cat_out);
        const uint8_t *nt = types + s_name * n, *ct = types + s_cat * n, *pt = types + s_ph * n;
        const uint8_t *tt = types + s_ts * n, *dt = types + s_dur * n;
        const int64_t *nv = ints + s_name * n, *cv = ints + s_cat * n, *pv = ints + s_ph * n;
        const int64_t *tv = ints + s_ts * n, *dv = ints + s_dur * n;
        int bad_code = 0;
        Py_BEGIN_ALLOW_THREADS
        try {
            for (Py_ssize_t i = 0; i < n && !refused && !bad_code; i++) {
                if (!(nt[i] == T_MISSING || nt[i] == T_STR) || !(ct[i] == T_MISSING || ct[i] == T_STR) ||
                    !(pt[i] == T_MISSING || pt[i] == T_NULL || pt[i] == T_STR)) {
                    refused = 1;
                    break;
                }
                const double ts = real_of(tt[i], tv[i]), dur = real_of(dt[i], dv[i]);
                if (!time_ok(tt[i], tv[i], ts, max_time) || !time_ok(dt[i], dv[i], dur, max_time)) {
                    refused = 1;
                    break;
                }
                const int64_t cat = ct[i] == T_STR ? cv[i] : m;
                const int named = nt[i] == T_STR;
                const int64_t name = named ? nv[i] : m;
                if (cat < 0 || cat > m || name < 0 || name > m) {
                    bad_code = 1;
                    break;
                }
                const int kind = kind_of[cat], fl = flags[name];
                const int64_t ph = pt[i] == T_STR ? pv[i] : -1;
                const int is_x = ph == x_code, is_i = ph == i_code;
                const int has_time = timed(tt[i]) && timed(dt[i]);
                const int unnamed_call = !named && is_x && kind == K_PYTHON;
                const int step = named && step_cat[cat] && (fl & F_STEP);
                const int memory = named && !step && !is_x && is_i && (fl & F_MEMORY);
                const int kept = named && !step && is_x && (kind != K_OTHER || (fl & F_DATALOADER));
                if ((unnamed_call || kept) && !has_time) refused = 1;
                if (step && !(is_x && has_time && dur > 0)) refused = 1;
                if (memory && !timed(tt[i])) refused = 1;
                const double s = ts - base;
                s_out[i] = s;
                t_out[i] = dur > 0 ? s + dur : s;
                name_codes[i] = name;
                cat_codes[i] = cat;
                if (step) rows[R_STEPS].push_back(i);
                if (memory) rows[R_MEMORY].push_back(i);
                const int py = kept && kind == K_PYTHON;
                if (unnamed_call || (py && !(fl & F_BUILTIN))) rows[R_CALLS].push_back(i);
                if (!py) {
                    if (!kept) continue;
                    if (kind == K_DEVICE) {
                        rows[R_DEVICE].push_back(i);
                    } else if (kind == K_RUNTIME) {
                        rows[R_RUNTIME].push_back(i);
                    } else { /* a data range may also be an annotation (a DATA_ANNOTATIONS range): in both */
                        if ((fl & F_DATALOADER) || (kind == K_ANNOTATION && (fl & F_DATA)))
                            rows[R_DATA].push_back(i);
                        if (!(fl & F_DATALOADER) && kind == K_OP) rows[R_OPS].push_back(i);
                        if (!(fl & F_DATALOADER) && kind == K_ANNOTATION) rows[R_ANNOTATIONS].push_back(i);
                    }
                    continue;
                }
                if (fl & F_BUILTIN) rows[R_BUILTINS].push_back(i);
                else if (dur >= long_us) rows[R_LONG].push_back(i);
                if (fl & F_MODEL) rows[R_MODEL].push_back(i);
                if (fl & F_MODULE) rows[R_MODULE].push_back(i);
            }
        } catch (const std::bad_alloc &) {
            refused = -1;
        }
        Py_END_ALLOW_THREADS
        if (refused < 0) {
            PyErr_NoMemory();
            goto done;
        }
        if (bad_code) {
            PyErr_SetString(PyExc_ValueError, "plan_rows: a name or category code outside the strings");
            goto done;
        }
    }
    if (refused) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    lists = PyTuple_New(R_LISTS);
    if (!lists) goto done;
    for (int k = 0; k < R_LISTS; k++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)rows[k].data(),
                                                (Py_ssize_t)(rows[k].size() * sizeof(int64_t)));
        if (!b) goto done;
        PyTuple_SET_ITEM(lists, k, b);
    }
    result = PyTuple_Pack(5, s_all, t_all, name_out, cat_out, lists);
done:
    Py_XDECREF(s_all);
    Py_XDECREF(t_all);
    Py_XDECREF(name_out);
    Py_XDECREF(cat_out);
    Py_XDECREF(lists);
    PyBuffer_Release(&types_b);
    PyBuffer_Release(&ints_b);
    PyBuffer_Release(&kind_b);
    PyBuffer_Release(&step_b);
    PyBuffer_Release(&flags_b);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, "A JSON array of trace events as columns (see the module source)."},
    {"spans", spans, METH_O, "Where each entry of a JSON array lies in the text (see the module source)."},
    {"splice", splice, METH_VARARGS, "Some entries with members set where they lie (see the module source)."},
    {"release", release, METH_NOARGS, "Free the calling thread's parser and its buffers."},
    {"in_place", in_place, METH_O, "Whether columns() parses this text where it lies, without copying it."},
    {"empty", empty, METH_O, "A bytearray of n bytes whose contents are not set, for a reader to fill."},
    {"shared_ints", shared_ints, METH_O, "int64s as a list of Python ints, equal values sharing one object."},
    {"open_frames", open_frames, METH_VARARGS, "The Python frames open at each operator (see the module source)."},
    {"joined", joined, METH_VARARGS, "Stretches of a text and new texts joined by ',\\n' (see the module source)."},
    {"plan_rows", plan_rows, METH_VARARGS, "A piece's checks, times, codes and rows of each kind (module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastread", "Trace events as columns, parsed by simdjson " SIMDJSON_VERSION ".",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastread(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && (PyModule_AddStringConstant(m, "SIMDJSON_VERSION", SIMDJSON_VERSION) < 0 ||
              PyModule_AddIntConstant(m, "PADDING", (long)simdjson::SIMDJSON_PADDING) < 0)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
