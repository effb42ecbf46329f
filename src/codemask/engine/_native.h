/* The private header of the C extension `codemask.engine._native`: the types and functions its
 * source files share (`_native.c` holds the module and says what each part does). Functions
 * shared between files carry the `cm_` prefix and hidden visibility; the rest stay static.
 */
#ifndef CODEMASK_NATIVE_H
#define CODEMASK_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define UNKNOWN (-2)

typedef struct {
    int32_t *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} IntBuf;

#define DEAD (-1)
#define FAILED (-3) /* an exception is set */

/* Int keys to non-negative int values, open addressing; clearing bumps a generation stamp, so a
 * map that once grew large costs nothing to clear for the next (small) closure. */
typedef struct {
    int32_t *key, *value;
    uint32_t *stamp;
    uint32_t gen;
    int bits;
    Py_ssize_t used;
} IntMap;

/* uint64 keys to int32 values, open addressing, no deletions. */
typedef struct {
    uint64_t *keys; /* key + 1; 0: empty */
    int32_t *values;
    int bits;
    Py_ssize_t used;
} U64Map;

/* An RTN state some nodes of a closure wait on: the first such node, and (from the second node on)
 * all their parents, sorted and made unique when the merged node is interned. */
typedef struct {
    int32_t q, first;
    int merged;
    IntBuf parents;
} Scan;

/* A buffer of a core's array kept between calls (`held_view`). */
typedef struct {
    PyObject *array, *name; /* the array held, and the attribute's name (interned at first use) */
    Py_buffer view;
} HeldView;

/* Scratch memory of closures and rows, reused from call to call. */
typedef struct {
    IntMap seen, scan;
    U64Map visited; /* a lazy step's (state, parents) pairs (`ParserCore._descend`) */
    IntBuf todo, ids, moved;
    Scan *entries;
    Py_ssize_t entry_count, entry_cap, entry_ready; /* the first `entry_ready` own their buffers */
    /* per symbol of a row: the column's hash, whether it differs from the previous symbol's, and
     * its class; per class: its first symbol and outcome */
    uint64_t *hash;
    uint8_t *differs;
    int32_t *class_of, *first_symbol, *outcome, *slots, *row;
    int slot_bits;
} Ctx;

typedef struct {
    PyObject_HEAD
    Py_buffer trans; /* int32 [states, alphabet] */
    Py_ssize_t alphabet, states;
    uint8_t *scanning, *accepting, *tail;
    int32_t *call_lo, *callee, *ret;
    PyObject *state_stacks, *state_flag;
    /* The parser states' index (`ParserCore._intern_state`): per state, where its sorted node ids
     * start in `st_ids`, how many and its flag; `st_slots` is the open-addressing index by (flag,
     * ids) (state id, or -1). The Python lists hold the same states, in the same order. */
    int32_t *st_ids, *st_len, *st_slots;
    int64_t *st_at;
    uint8_t *st_flag;
    Py_ssize_t st_count, st_cap, st_ids_size, st_ids_cap;
    int st_slot_bits;
    /* The stack nodes, kept only here (`ParserCore.node_state` and `node_parents` read them through
     * `state_of` and `parents_of`; Python lists of them were 8 million items for the garbage
     * collector to traverse after 44 Python files, and two appends and a tuple per node): per node
     * its RTN state, where its parents start in `par` and how many, and its hash; `slots` is the
     * open-addressing index by (state, parents) (node id, or -1). Nodes that share their parents
     * with an older node (a tail call, a moved top) share its run of `par`. */
    int32_t *nq, *npn;
    uint64_t *slots;
    int64_t *npo;
    uint64_t *nh;
    int32_t *par;
    Py_ssize_t ncount, ncap, par_size, par_cap;
    int slot_bits;
    Py_ssize_t max_stacks;
    Ctx *spare;
    /* a lazy core (`ParserCore(lazy=True)`): calls are not expanded by closures. Per RTN state:
     * whether a node there waits on input (`_first_bits` not empty), whether its frame may end
     * without a symbol, and its first symbols (`first_words` uint64 words each) */
    int lazy;
    uint8_t *waits, *nullable;
    uint64_t *first;
    Py_ssize_t first_words;
    HeldView held_table, held_flags, held_has_stacks; /* the core's per-state arrays (`held_view`) */
    int arrays_moved; /* ParserCore._grow rebound them (`arrays_moved`): take them again (`cm_core_arrays`) */
    uint64_t serial; /* (which interner of the process: memos keyed by its state ids say whose they are) */
    uint8_t *chain_kind; /* per RTN state, for the position walks (`rtn_chain`): 0 not known yet, 1 no, 2 yes */
} Interner;

typedef struct {
    PyObject_HEAD
    PyObject *parser;           /* the ParserCore */
    Interner *x;                /* its `_native` */
    PyObject *parser_acquire, *parser_release; /* its `lock`'s methods */
    PyObject *end_classes;      /* LexerCore.end_classes: (terminal, measured) per end class */
    PyObject *keys, *index;     /* IndentingParser.keys and _index (NULL without indentation) */
    PyObject *key_acquire, *key_release;       /* IndentingParser._lock's methods */
    PyObject *after, *fresh;    /* the Python ones: after(pid, end class) -> pid; fresh(pid) -> lexer state */
    uint8_t *kind;              /* per terminal, K_* flags */
    Py_ssize_t terminals;
    uint64_t *allowed;          /* per RTN state, the symbols a node there takes (`ParserCore.allowed_words`) */
    Py_ssize_t rtn_states, words;
    int32_t indent, dedent, newline;
    long long computed, computed_ns; /* parser steps computed (`ParserCore._compute_step`) and their time */
    U64Map by_hash;             /* a bit set's hash -> its entry */
    uint64_t *sets, *scratch;   /* entry i's bits at sets[i * words] */
    int32_t *lids;
    Py_ssize_t count, cap;
} SymbolSteps;

/* Sequences of int32 (sorted state sets) to int32 values, keys kept in one pool. */
typedef struct {
    IntBuf pool;
    int64_t *off;
    int32_t *len, *value;
    uint64_t *hash;
    Py_ssize_t count, cap;
    int32_t *slots;
    int bits;
} SeqMap;

/* Functions and type objects shared between the source files, per file. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* _native_common.c */
PyObject *cm_int_tuple(const int32_t *a, Py_ssize_t n);
PyObject *cm_buf_bytes(const IntBuf *b);
int cm_bad(const char *what);
int cm_need(const Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name);
int cm_map_init(IntMap *m, int bits);
void cm_map_free(IntMap *m);
void cm_map_clear(IntMap *m);
int cm_map_put(IntMap *m, int32_t key, int32_t value);
int cm_u64_init(U64Map *m, int bits);
void cm_u64_clear(U64Map *m);
int cm_u64_put(U64Map *m, uint64_t key, int32_t value);
int cm_array_view(PyObject *owner, const char *label, const char *name, Py_ssize_t itemsize, Py_ssize_t count,
                  Py_buffer *view);
void cm_held_free(HeldView *h);
int cm_core_arrays(Interner *x, PyObject *core, Py_ssize_t states);
int cm_held_view(HeldView *h, PyObject *owner, const char *label, const char *name, Py_ssize_t itemsize,
                 Py_ssize_t count);
int cm_cmp_int32(const void *a, const void *b);
int cm_cmp_uint64(const void *a, const void *b);

/* _native_walk.c */
PyObject *cm_outputs_tuple(const IntBuf *out, int count);
PyObject *cm_walk(PyObject *self, PyObject *args);

/* _native_closure.c */
Ctx *cm_ctx_take(Interner *x);
void cm_ctx_give(Interner *x, Ctx *c);
Py_ssize_t cm_as_id(PyObject *found);
uint64_t cm_node_hash(int32_t q, const int32_t *ps, Py_ssize_t n);
int cm_fill_row(Interner *x, PyObject *core, Ctx *c, Py_ssize_t state);
int32_t cm_bottom_state(Interner *x, PyObject *core, int32_t q, int32_t parent);
void *cm_copy_array(Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name);
int cm_any_out_of_range(const int32_t *values, Py_ssize_t count, Py_ssize_t states);
int32_t cm_step_state(Interner *x, PyObject *core, Py_ssize_t state, Py_ssize_t symbol);
extern PyTypeObject cm_InternerType;

/* _native_position.c */
extern PyTypeObject cm_PositionWalkerType;

/* _native_lexer.c */
extern PyTypeObject cm_LexerStepperType;

/* _native_lex_parser.c */
int32_t cm_state_result(PyObject *result);
int32_t cm_ss_after(SymbolSteps *s, int32_t pid, int32_t end_class);
int32_t cm_ss_fresh(SymbolSteps *s, int32_t pid);
extern PyTypeObject cm_SymbolStepsType;

/* _native_residuals.c */
extern PyTypeObject cm_ResidualWalkerType;

/* _native_dfa.c */
uint64_t cm_seq_hash(const int32_t *a, Py_ssize_t n);
void cm_seqmap_free(SeqMap *m);
int32_t cm_seqmap_get(const SeqMap *m, const int32_t *a, Py_ssize_t n, uint64_t h);
int cm_seqmap_put(SeqMap *m, const int32_t *a, Py_ssize_t n, uint64_t h, int32_t value);
PyObject *cm_dfa_of_nfa(Py_ssize_t states, int start, int final, const int32_t *eps_flat, Py_ssize_t n_eps,
                        const int32_t *edges_flat, Py_ssize_t n_edges, const int32_t *calls_flat,
                        Py_ssize_t n_calls, Py_ssize_t alphabet, Py_ssize_t max_states);

/* _native_ir.c */
PyObject *cm_set_ir(PyObject *self, PyObject *args);
PyObject *cm_dfa_of_expr(PyObject *self, PyObject *args);
PyObject *cm_expr_text(PyObject *self, PyObject *expr);
PyObject *cm_expr_digest(PyObject *self, PyObject *args);
PyObject *cm_least_fixed_point(PyObject *self, PyObject *args);
PyObject *cm_strongly_connected(PyObject *self, PyObject *edges);
PyObject *cm_stack_tables(PyObject *self, PyObject *args);
PyObject *cm_rule_uses(PyObject *self, PyObject *args);
PyObject *cm_expr_size(PyObject *self, PyObject *args);
PyObject *cm_left_calls(PyObject *self, PyObject *args);
PyObject *cm_largest_repeat_bound(PyObject *self, PyObject *expr);
PyObject *cm_expr_names(PyObject *self, PyObject *expr);
PyObject *cm_ir_seq(PyObject *self, PyObject *items);
PyObject *cm_ir_choice(PyObject *self, PyObject *args);
PyObject *cm_substitute(PyObject *self, PyObject *args);

/* _native_follow.c */
PyObject *cm_follow_bytes(PyObject *self, PyObject *args);
PyObject *cm_rule_graph(PyObject *self, PyObject *args);

/* _native_bits.c */
PyObject *cm_set_bits_where(PyObject *self, PyObject *args);
PyObject *cm_json_string_chars(PyObject *self, PyObject *args);
PyObject *cm_string_counts(PyObject *self, PyObject *args);
PyObject *cm_json_char_ends(PyObject *self, PyObject *args);
PyObject *cm_distinct(PyObject *self, PyObject *args);
PyObject *cm_pack_rows(PyObject *self, PyObject *args);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

/* Small helpers of the hot loops, and those whose outputs gcc must see set (-Wmaybe-uninitialized):
 * static inline, so that every file inlines them as the single file did. */

/* Make room for one more item in the array `*data` of `size` items (capacity `*cap`, doubled from
 * `first` when full); -1 with MemoryError set if that fails. */
static inline int reserve(void **data, Py_ssize_t *cap, Py_ssize_t size, size_t itemsize, Py_ssize_t first) {
    if (size < *cap) return 0;
    Py_ssize_t grown_cap = *cap ? 2 * *cap : first;
    void *grown = realloc(*data, (size_t)grown_cap * itemsize);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    *data = grown;
    *cap = grown_cap;
    return 0;
}

static inline int buf_push(IntBuf *b, int32_t value) {
    if (reserve((void **)&b->data, &b->cap, b->size, sizeof(int32_t), 1024)) return -1;
    b->data[b->size++] = value;
    return 0;
}

/* Sorts without a comparison callback: glibc's qsort is a merge sort that calls one per comparison,
 * which was half the time of a large rule's subset construction. Quicksort on a median of three,
 * the smaller part first (depth at most log n), insertion sort below CM_SMALL_SORT items. */
#define CM_SMALL_SORT 24
#define CM_LESS_PAIR(x, y) ((x)[0] < (y)[0] || ((x)[0] == (y)[0] && (x)[1] < (y)[1]))

#define CM_DEFINE_SORT(NAME, T)                                                                              \
    static inline void NAME(T *a, Py_ssize_t n) {                                                           \
        while (n > CM_SMALL_SORT) {                                                                          \
            T x = a[0], y = a[n / 2], z = a[n - 1];                                                          \
            T pivot = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));                 \
            Py_ssize_t i = -1, j = n;                                                                        \
            for (;;) {                                                                                       \
                do i++;                                                                                      \
                while (a[i] < pivot);                                                                        \
                do j--;                                                                                      \
                while (a[j] > pivot);                                                                        \
                if (i >= j) break;                                                                           \
                T t = a[i];                                                                                  \
                a[i] = a[j];                                                                                 \
                a[j] = t;                                                                                    \
            }                                                                                                \
            Py_ssize_t left = j + 1; /* [0, left) <= pivot <= [left, n), both parts non-empty */             \
            if (left < n - left) {                                                                           \
                NAME(a, left);                                                                               \
                a += left;                                                                                   \
                n -= left;                                                                                   \
            } else {                                                                                         \
                NAME(a + left, n - left);                                                                    \
                n = left;                                                                                    \
            }                                                                                                \
        }                                                                                                    \
        for (Py_ssize_t i = 1; i < n; i++) {                                                                 \
            T v = a[i];                                                                                      \
            Py_ssize_t k = i;                                                                                \
            for (; k > 0 && a[k - 1] > v; k--) a[k] = a[k - 1];                                              \
            a[k] = v;                                                                                        \
        }                                                                                                    \
    }

CM_DEFINE_SORT(cm_sort_int32, int32_t)
CM_DEFINE_SORT(cm_sort_int64, int64_t)

/* `n` (first, second) pairs of int32, in place, by first then second. */
static inline void cm_sort_pairs(int32_t *a, Py_ssize_t n) {
    while (n > CM_SMALL_SORT) {
        int32_t *x = a, *y = a + 2 * (n / 2), *z = a + 2 * (n - 1), *m;
        if (CM_LESS_PAIR(x, y)) m = CM_LESS_PAIR(y, z) ? y : (CM_LESS_PAIR(x, z) ? z : x);
        else m = CM_LESS_PAIR(x, z) ? x : (CM_LESS_PAIR(y, z) ? z : y);
        int32_t pivot[2] = {m[0], m[1]};
        Py_ssize_t i = -1, j = n;
        for (;;) {
            do i++;
            while (CM_LESS_PAIR(a + 2 * i, pivot));
            do j--;
            while (CM_LESS_PAIR(pivot, a + 2 * j));
            if (i >= j) break;
            int32_t t0 = a[2 * i], t1 = a[2 * i + 1];
            a[2 * i] = a[2 * j];
            a[2 * i + 1] = a[2 * j + 1];
            a[2 * j] = t0;
            a[2 * j + 1] = t1;
        }
        Py_ssize_t left = j + 1;
        if (left < n - left) {
            cm_sort_pairs(a, left);
            a += 2 * left;
            n -= left;
        } else {
            cm_sort_pairs(a + 2 * left, n - left);
            n = left;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        int32_t v[2] = {a[2 * i], a[2 * i + 1]};
        Py_ssize_t k = i;
        for (; k > 0 && CM_LESS_PAIR(v, a + 2 * (k - 1)); k--) {
            a[2 * k] = a[2 * (k - 1)];
            a[2 * k + 1] = a[2 * (k - 1) + 1];
        }
        a[2 * k] = v[0];
        a[2 * k + 1] = v[1];
    }
}

static inline size_t map_slot(const IntMap *m, int32_t key) {
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t i = (size_t)(((uint64_t)(uint32_t)key * 0x9E3779B97F4A7C15ull) >> (64 - m->bits));
    while (m->stamp[i] == m->gen && m->key[i] != key) i = (i + 1) & mask;
    return i;
}

/* The value stored for `key`, or -1. */
static inline int32_t map_get(const IntMap *m, int32_t key) {
    size_t i = map_slot(m, key);
    return m->stamp[i] == m->gen ? m->value[i] : -1;
}

static inline size_t u64_slot(const U64Map *m, uint64_t key) {
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t i = (size_t)(((key + 1) * 0x9E3779B97F4A7C15ull) >> (64 - m->bits));
    while (m->keys[i] && m->keys[i] != key + 1) i = (i + 1) & mask;
    return i;
}

/* The value stored for `key`, or UNKNOWN. */
static inline int32_t u64_get(const U64Map *m, uint64_t key) {
    size_t i = u64_slot(m, key);
    return m->keys[i] ? m->values[i] : UNKNOWN;
}

static inline int index_error(const char *what) {
    PyErr_SetString(PyExc_IndexError, what);
    return -1;
}

/* The RTN state of stack node `s`, and its parents: `*n` ids at `x->par + x->npo[s]` (read them
 * before interning another node, which may move `par`). */
static inline int node_at(Interner *x, Py_ssize_t s, int32_t *q, Py_ssize_t *n) {
    if (s < 0 || s >= x->ncount) return index_error("stack node out of range");
    *q = x->nq[s];
    *n = x->npn[s];
    return 0;
}

/* The node id of a Python int, checked against the interned nodes. */
static inline int node_arg(Interner *x, PyObject *obj, int32_t *s) {
    long value = PyLong_AsLong(obj);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value >= x->ncount) return index_error("stack node out of range");
    *s = (int32_t)value;
    return 0;
}

#endif /* CODEMASK_NATIVE_H */
