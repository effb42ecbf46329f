/* The engine's hot loops in C: the mask caches' trie walks, and the parser's closures.
 *
 * `walk` consumes trie nodes' bytes from parser states through the memoised transition table
 * (`ParserCore.table`) depth first, exactly as `mask_cache._walk_scalar` does in Python, and
 * reports what it finds: tokens whose bytes are all consumed with the parse alive (ok), ranges of
 * tokens whose prefix reached the frame's bottom (exits, with the depth of that prefix), and the
 * (node, state) pairs whose transition the table does not know yet (pending). Python computes the
 * pending transitions (they intern new parser states) and calls again with the pending pairs;
 * the findings of all calls together are the walk's.
 *
 * `LexerStepper` computes the lexer's transitions (`LexerCore._compute`), and walks through the
 * lexer's states computing the transitions it meets on the way: `walk`, the trie walk of
 * `lexer_masks.classify_lexer_state` (per token, alive at its end (accepted), refused by a poisoned
 * state (blocked), or the lexeme dead inside it, reported with the end of the last match on the
 * way: exits), and `residuals`, the tails' first lexeme for `lexer_masks.ResidualSets.split`.
 *
 * `Interner` computes the parser's transitions: `ParserCore.closure` and `ParserCore._fill_row` (see
 * below), interning into the ParserCore's own Python lists and dicts exactly as the Python code
 * does, about seven times faster (`benchmarks/parser_rows.py`).
 *
 * In lexer mode, `SymbolSteps` is the lexer layer's parser side (`LexParserCore.after`, the fresh
 * lexer states) and `ResidualWalker` the recursion over residual sets and parser states
 * (`LexerMaskComputer._residuals_accepted`); `set_bits_where`, `pack_rows` and `distinct` are
 * the few loops of a mask's and a classification's bookkeeping that numpy did with a call per step.
 *
 * Built as an optional extension (setup.py): without a C compiler the numpy walk and the Python
 * parser are used instead, and the tests compare the two. Every index read from the arguments is
 * bounds-checked, so a bad argument raises instead of reading out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NATIVE_VERSION 21
#define UNKNOWN (-2)

typedef struct {
    int32_t *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} IntBuf;

/* Make room for one more item in the array `*data` of `size` items (capacity `*cap`, doubled from
 * `first` when full); -1 with MemoryError set if that fails. */
static int reserve(void **data, Py_ssize_t *cap, Py_ssize_t size, size_t itemsize, Py_ssize_t first) {
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

static int buf_push(IntBuf *b, int32_t value) {
    if (reserve((void **)&b->data, &b->cap, b->size, sizeof(int32_t), 1024)) return -1;
    b->data[b->size++] = value;
    return 0;
}

/* A tuple of the `n` ints at `a`. */
static PyObject *int_tuple(const int32_t *a, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLong(a[i]);
        if (!item) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, item);
    }
    return t;
}

static PyObject *buf_bytes(const IntBuf *b) {
    return PyBytes_FromStringAndSize((const char *)b->data, b->size * (Py_ssize_t)sizeof(int32_t));
}

/* The trie, flattened over all levels: node arrays indexed by a global node id. */
typedef struct {
    const uint8_t *byte;
    const int32_t *lo, *hi, *token, *child_lo, *child_hi, *depth;
    Py_ssize_t count;
} Trie;

typedef struct {
    const int32_t *table;
    const uint8_t *flags, *has_stacks;
    Py_ssize_t alphabet, states;
} Table;

enum { OK_OWNER, OK_TOKEN, EXIT_OWNER, EXIT_LO, EXIT_HI, EXIT_DEPTH, PEND_NODE, PEND_STATE, PEND_OWNER, NUM_OUT };

static int bad(const char *what) {
    PyErr_SetString(PyExc_ValueError, what);
    return -1;
}

/* Consume node `node`'s byte from `state` for `owner`; push the children that go on onto `stack`
 * (triples node, state, owner). */
static int visit(const Trie *trie, const Table *tab, int32_t node, int32_t state, int32_t owner,
                 IntBuf *out, IntBuf *stack) {
    if (node < 0 || node >= trie->count) return bad("trie node out of range");
    if (state < 0 || state >= tab->states) return bad("parser state out of range");
    int32_t next = tab->table[(Py_ssize_t)state * tab->alphabet + trie->byte[node]];
    if (next == UNKNOWN) {
        if (buf_push(&out[PEND_NODE], node) || buf_push(&out[PEND_STATE], state) ||
            buf_push(&out[PEND_OWNER], owner))
            return -1;
        return 0;
    }
    if (next < 0) return 0;
    if (next >= tab->states) return bad("transition to a parser state out of range");
    int32_t token = trie->token[node];
    if (token >= 0 && (buf_push(&out[OK_OWNER], owner) || buf_push(&out[OK_TOKEN], token))) return -1;
    if (tab->flags[next]) {
        if (buf_push(&out[EXIT_OWNER], owner) || buf_push(&out[EXIT_LO], trie->lo[node] + (token >= 0)) ||
            buf_push(&out[EXIT_HI], trie->hi[node]) || buf_push(&out[EXIT_DEPTH], trie->depth[node]))
            return -1;
    }
    int32_t lo = trie->child_lo[node], hi = trie->child_hi[node];
    if (!tab->has_stacks[next] || hi <= lo) return 0;
    if (lo < 0 || hi > trie->count) return bad("trie children out of range");
    for (int32_t child = hi - 1; child >= lo; child--) {
        if (buf_push(stack, child) || buf_push(stack, next) || buf_push(stack, owner)) return -1;
    }
    return 0;
}

static int run(const Trie *trie, const Table *tab, const int32_t *nodes, const int32_t *states,
               const int32_t *owners, Py_ssize_t items, IntBuf *out) {
    IntBuf stack = {0};
    int status = 0;
    for (Py_ssize_t i = items - 1; i >= 0 && !status; i--) {
        status = buf_push(&stack, nodes[i]) || buf_push(&stack, states[i]) || buf_push(&stack, owners[i]);
    }
    while (!status && stack.size) {
        stack.size -= 3;
        status = visit(trie, tab, stack.data[stack.size], stack.data[stack.size + 1], stack.data[stack.size + 2],
                       out, &stack);
    }
    free(stack.data);
    return status ? -1 : 0;
}

static int need(const Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name) {
    if (view->len != itemsize * count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, itemsize * count, view->len);
        return -1;
    }
    return 0;
}

/* The flat trie in buffers v[0..6] (byte, lo, hi, token, child_lo, child_hi, depth), every int32
 * array checked to hold one entry per node. */
static int trie_of(const Py_buffer *v, Trie *trie) {
    Py_ssize_t count = v[0].len;
    for (int i = 1; i <= 6; i++) {
        if (need(&v[i], sizeof(int32_t), count, "trie array")) return -1;
    }
    *trie = (Trie){(const uint8_t *)v[0].buf, (const int32_t *)v[1].buf, (const int32_t *)v[2].buf,
                   (const int32_t *)v[3].buf, (const int32_t *)v[4].buf, (const int32_t *)v[5].buf,
                   (const int32_t *)v[6].buf, count};
    return 0;
}

/* A walk's result: a tuple of the bytes of its `count` output arrays (NULL with an exception set). */
static PyObject *outputs_tuple(const IntBuf *out, int count) {
    PyObject *result = PyTuple_New(count);
    if (!result) return NULL;
    for (int i = 0; i < count; i++) {
        PyObject *bytes = buf_bytes(&out[i]);
        if (!bytes) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, bytes);
    }
    return result;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer v[14];
    Py_ssize_t alphabet;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "y*ny*y*y*y*y*y*y*y*y*y*y*y*", &v[0], &alphabet, &v[1], &v[2], &v[3], &v[4],
                          &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12]))
        return NULL;
    PyObject *result = NULL;
    IntBuf out[NUM_OUT];
    memset(out, 0, sizeof(out));
    Table tab = {(const int32_t *)v[0].buf, (const uint8_t *)v[1].buf, (const uint8_t *)v[2].buf, alphabet, 0};
    Trie trie;
    Py_ssize_t items = v[10].len / (Py_ssize_t)sizeof(int32_t);
    if (trie_of(&v[3], &trie)) goto done;
    if (alphabet < 256 || v[0].len % ((Py_ssize_t)sizeof(int32_t) * alphabet)) {
        bad("table: not a whole number of rows of the alphabet (at least 256 symbols)");
        goto done;
    }
    tab.states = v[0].len / ((Py_ssize_t)sizeof(int32_t) * alphabet);
    if (need(&v[1], 1, tab.states, "flags") || need(&v[2], 1, tab.states, "has_stacks")) goto done;
    if (need(&v[10], sizeof(int32_t), items, "nodes") || need(&v[11], sizeof(int32_t), items, "states") ||
        need(&v[12], sizeof(int32_t), items, "owners"))
        goto done;
    if (run(&trie, &tab, (const int32_t *)v[10].buf, (const int32_t *)v[11].buf, (const int32_t *)v[12].buf, items,
            out))
        goto done;
    result = outputs_tuple(out, NUM_OUT);
done:
    for (int i = 0; i < NUM_OUT; i++) free(out[i].data);
    for (int i = 0; i < 13; i++) PyBuffer_Release(&v[i]);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * The parser's closure and transition rows (`ParserCore.closure` and `ParserCore._fill_row`).
 *
 * An `Interner` holds the RTN as C arrays, the stack nodes with their index (all nodes of its core
 * are interned here, `ParserCore.node` included), and references to the ParserCore's lists and
 * dicts, which it appends to (which ParserCore never rebinds). It does exactly what the Python
 * methods do, in the same order: the same stack nodes and parser states are interned with the same
 * ids, with the same sorted tuples of parents (whose order orders the pops of later closures). The
 * lists stay the record Python reads, so the Python methods and these functions can be mixed freely
 * on one core.
 * ------------------------------------------------------------------------------------------- */

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

static int map_init(IntMap *m, int bits) {
    size_t cap = (size_t)1 << bits;
    m->key = (int32_t *)malloc(cap * sizeof(int32_t));
    m->value = (int32_t *)malloc(cap * sizeof(int32_t));
    m->stamp = (uint32_t *)calloc(cap, sizeof(uint32_t));
    m->gen = 1;
    m->bits = bits;
    m->used = 0;
    if (!m->key || !m->value || !m->stamp) {
        free(m->key);
        free(m->value);
        free(m->stamp);
        m->key = m->value = NULL;
        m->stamp = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void map_free(IntMap *m) {
    free(m->key);
    free(m->value);
    free(m->stamp);
}

static void map_clear(IntMap *m) {
    m->used = 0;
    if (++m->gen == 0) {
        memset(m->stamp, 0, ((size_t)1 << m->bits) * sizeof(uint32_t));
        m->gen = 1;
    }
}

static size_t map_slot(const IntMap *m, int32_t key) {
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t i = (size_t)(((uint64_t)(uint32_t)key * 0x9E3779B97F4A7C15ull) >> (64 - m->bits));
    while (m->stamp[i] == m->gen && m->key[i] != key) i = (i + 1) & mask;
    return i;
}

/* The value stored for `key`, or -1. */
static int32_t map_get(const IntMap *m, int32_t key) {
    size_t i = map_slot(m, key);
    return m->stamp[i] == m->gen ? m->value[i] : -1;
}

static int map_grow(IntMap *m) {
    IntMap bigger;
    if (map_init(&bigger, m->bits + 1)) return -1;
    size_t cap = (size_t)1 << m->bits;
    for (size_t i = 0; i < cap; i++) {
        if (m->stamp[i] != m->gen) continue;
        size_t j = map_slot(&bigger, m->key[i]);
        bigger.key[j] = m->key[i];
        bigger.value[j] = m->value[i];
        bigger.stamp[j] = bigger.gen;
        bigger.used++;
    }
    map_free(m);
    *m = bigger;
    return 0;
}

/* Store `key` (absent) -> `value`. */
static int map_put(IntMap *m, int32_t key, int32_t value) {
    if (2 * (m->used + 1) > ((Py_ssize_t)1 << m->bits) && map_grow(m)) return -1;
    size_t i = map_slot(m, key);
    m->key[i] = key;
    m->value[i] = value;
    m->stamp[i] = m->gen;
    m->used++;
    return 0;
}

/* uint64 keys to int32 values, open addressing, no deletions. */
typedef struct {
    uint64_t *keys; /* key + 1; 0: empty */
    int32_t *values;
    int bits;
    Py_ssize_t used;
} U64Map;

static int u64_init(U64Map *m, int bits) {
    m->keys = (uint64_t *)calloc((size_t)1 << bits, sizeof(uint64_t));
    m->values = (int32_t *)malloc(((size_t)1 << bits) * sizeof(int32_t));
    m->bits = bits;
    m->used = 0;
    if (!m->keys || !m->values) {
        free(m->keys);
        free(m->values);
        m->keys = NULL;
        m->values = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static size_t u64_slot(const U64Map *m, uint64_t key) {
    size_t mask = ((size_t)1 << m->bits) - 1;
    size_t i = (size_t)(((key + 1) * 0x9E3779B97F4A7C15ull) >> (64 - m->bits));
    while (m->keys[i] && m->keys[i] != key + 1) i = (i + 1) & mask;
    return i;
}

/* The value stored for `key`, or UNKNOWN. */
static int32_t u64_get(const U64Map *m, uint64_t key) {
    size_t i = u64_slot(m, key);
    return m->keys[i] ? m->values[i] : UNKNOWN;
}

/* Empty the map (its table keeps its size). */
static void u64_clear(U64Map *m) {
    if (m->used) memset(m->keys, 0, ((size_t)1 << m->bits) * sizeof(uint64_t));
    m->used = 0;
}

static int u64_put(U64Map *m, uint64_t key, int32_t value) {
    if (2 * (m->used + 1) > ((Py_ssize_t)1 << m->bits)) {
        U64Map bigger;
        if (u64_init(&bigger, m->bits + 1)) return -1;
        for (size_t i = 0; i < ((size_t)1 << m->bits); i++) {
            if (!m->keys[i]) continue;
            size_t j = u64_slot(&bigger, m->keys[i] - 1);
            bigger.keys[j] = m->keys[i];
            bigger.values[j] = m->values[i];
            bigger.used++;
        }
        free(m->keys);
        free(m->values);
        *m = bigger;
    }
    size_t i = u64_slot(m, key);
    if (!m->keys[i]) m->used++;
    m->keys[i] = key + 1;
    m->values[i] = value;
    return 0;
}

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
    PyObject *state_stacks, *state_flag, *state_index;
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
} Interner;

static void ctx_free(Ctx *c) {
    if (!c) return;
    map_free(&c->seen);
    map_free(&c->scan);
    free(c->visited.keys);
    free(c->visited.values);
    free(c->todo.data);
    free(c->ids.data);
    free(c->moved.data);
    for (Py_ssize_t i = 0; i < c->entry_ready; i++) free(c->entries[i].parents.data);
    free(c->entries);
    free(c->hash);
    free(c->differs);
    free(c->class_of);
    free(c->first_symbol);
    free(c->outcome);
    free(c->slots);
    free(c->row);
    free(c);
}

static Ctx *ctx_new(Py_ssize_t alphabet) {
    Ctx *c = (Ctx *)calloc(1, sizeof(Ctx));
    if (!c) return (Ctx *)PyErr_NoMemory();
    if (map_init(&c->seen, 6) || map_init(&c->scan, 4) || u64_init(&c->visited, 6)) {
        ctx_free(c);
        return NULL;
    }
    int bits = 1;
    while (((Py_ssize_t)1 << bits) < 2 * alphabet) bits++;
    c->slot_bits = bits;
    c->hash = (uint64_t *)malloc((size_t)alphabet * sizeof(uint64_t));
    c->differs = (uint8_t *)malloc((size_t)alphabet);
    c->class_of = (int32_t *)malloc((size_t)alphabet * sizeof(int32_t));
    c->first_symbol = (int32_t *)malloc((size_t)alphabet * sizeof(int32_t));
    c->outcome = (int32_t *)malloc((size_t)alphabet * sizeof(int32_t));
    c->slots = (int32_t *)malloc(((size_t)1 << bits) * sizeof(int32_t));
    c->row = (int32_t *)malloc((size_t)alphabet * sizeof(int32_t));
    if (!c->hash || !c->differs || !c->class_of || !c->first_symbol || !c->outcome || !c->slots || !c->row) {
        ctx_free(c);
        return (Ctx *)PyErr_NoMemory();
    }
    return c;
}

/* The interner's scratch, or a fresh one if it is in use (a closure re-entered from `_grow`). */
static Ctx *ctx_take(Interner *x) {
    Ctx *c = x->spare;
    if (c) {
        x->spare = NULL;
        return c;
    }
    return ctx_new(x->alphabet);
}

static void ctx_give(Interner *x, Ctx *c) {
    if (x->spare) {
        ctx_free(c);
    } else {
        x->spare = c;
    }
}

static void ctx_drop_sets(Ctx *c) {
    c->entry_count = 0;
}

static int index_error(const char *what) {
    PyErr_SetString(PyExc_IndexError, what);
    return -1;
}

/* The RTN state of stack node `s`, and its parents: `*n` ids at `x->par + x->npo[s]` (read them
 * before interning another node, which may move `par`). */
static int node_at(Interner *x, Py_ssize_t s, int32_t *q, Py_ssize_t *n) {
    if (s < 0 || s >= x->ncount) return index_error("stack node out of range");
    *q = x->nq[s];
    *n = x->npn[s];
    return 0;
}

static Py_ssize_t as_id(PyObject *found) {
    Py_ssize_t id = PyLong_AsSsize_t(found);
    if (id == -1 && PyErr_Occurred()) return -1;
    if (id < 0 || id > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "interned id out of range");
        return -1;
    }
    return id;
}

/* The index's hash of (q, parents); its top bits pick the slot, so it ends with a full avalanche
 * (MurmurHash3's finaliser): small ids otherwise differ only in low bits. */
static uint64_t node_hash(int32_t q, const int32_t *ps, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)(uint32_t)q;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)ps[i]) * 0x100000001B3ull + 0x632BE59BD9B4E019ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 33);
}

/* A slot of the node index: the low 32 bits of the node's hash (a fingerprint: a probe compares it
 * without reading the node's record, which is a cache miss per occupied slot in a table of
 * millions) over its id + 1; 0 is an empty slot. */
static uint64_t slot_of(uint64_t h, Py_ssize_t id) {
    return (h << 32) | (uint64_t)(uint32_t)(id + 1);
}

static int grow_slots(Interner *x) {
    int bits = x->slot_bits ? x->slot_bits + 1 : 12;
    size_t size = (size_t)1 << bits, mask = size - 1;
    uint64_t *slots = (uint64_t *)calloc(size, sizeof(uint64_t));
    if (!slots) return PyErr_NoMemory(), -1;
    for (Py_ssize_t id = 0; id < x->ncount; id++) {
        size_t i = (size_t)(x->nh[id] >> (64 - bits));
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = slot_of(x->nh[id], id);
    }
    free(x->slots);
    x->slots = slots;
    x->slot_bits = bits;
    return 0;
}

/* `ParserCore.node` of (q, the `n` sorted ids at `ps`): the node's id, interned if new; -1 on
 * error. `same_as` is a node with these very parents (whose run of `par` is shared) or -1. Runs no
 * Python code. */
static Py_ssize_t node(Interner *x, int32_t q, const int32_t *ps, Py_ssize_t n, Py_ssize_t same_as) {
    uint64_t h = node_hash(q, ps, n);
    size_t mask, i;
    Py_ssize_t id;
    mask = ((size_t)1 << x->slot_bits) - 1;
    i = (size_t)(h >> (64 - x->slot_bits));
    for (uint64_t e; (e = x->slots[i]) != 0; i = (i + 1) & mask) {
        if ((uint32_t)(e >> 32) != (uint32_t)h) continue;
        Py_ssize_t found = (Py_ssize_t)(uint32_t)e - 1;
        if (x->nh[found] == h && x->nq[found] == q && x->npn[found] == n &&
            (!n || !memcmp(x->par + x->npo[found], ps, (size_t)n * sizeof(int32_t)))) {
            return found;
        }
    }
    id = x->ncount;
    int failed = id >= INT32_MAX;
    if (failed) PyErr_SetString(PyExc_OverflowError, "too many stack nodes");
    Py_ssize_t inside = ps >= x->par && ps < x->par + x->par_size ? ps - x->par : -1;
    while (!failed && same_as < 0 && x->par_size + n > x->par_cap) {
        Py_ssize_t cap = x->par_cap ? 2 * x->par_cap : 4096;
        int32_t *grown = (int32_t *)realloc(x->par, (size_t)cap * sizeof(int32_t));
        if (grown) {
            x->par = grown;
            x->par_cap = cap;
        } else {
            failed = 1;
        }
    }
    if (!failed && id >= x->ncap) {
        Py_ssize_t cap = x->ncap ? 2 * x->ncap : 4096;
        int32_t *nq = (int32_t *)realloc(x->nq, (size_t)cap * sizeof(int32_t));
        if (nq) x->nq = nq;
        int32_t *npn = nq ? (int32_t *)realloc(x->npn, (size_t)cap * sizeof(int32_t)) : NULL;
        if (npn) x->npn = npn;
        int64_t *npo = npn ? (int64_t *)realloc(x->npo, (size_t)cap * sizeof(int64_t)) : NULL;
        if (npo) x->npo = npo;
        uint64_t *nh = npo ? (uint64_t *)realloc(x->nh, (size_t)cap * sizeof(uint64_t)) : NULL;
        if (nh) {
            x->nh = nh;
            x->ncap = cap;
        } else {
            failed = 1;
        }
    }
    if (failed && !PyErr_Occurred()) PyErr_NoMemory();
    if (failed) return -1;
    if (same_as >= 0) {
        x->npo[id] = x->npo[same_as];
    } else {
        if (inside >= 0) ps = x->par + inside;
        if (n) memcpy(x->par + x->par_size, ps, (size_t)n * sizeof(int32_t));
        x->npo[id] = x->par_size;
        x->par_size += n;
    }
    x->nq[id] = q;
    x->npn[id] = (int32_t)n;
    x->nh[id] = h;
    x->slots[i] = slot_of(h, id);
    x->ncount++;
    if (2 * x->ncount > ((Py_ssize_t)1 << x->slot_bits) && grow_slots(x)) return -1;
    return id;
}

/* Append the `n` ids at `ps` to `out`. */
static int push_ids(IntBuf *out, const int32_t *ps, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (buf_push(out, ps[i])) return -1;
    }
    return 0;
}

/* `scanning.setdefault(q, set()).update(parents)` for node `s` = (q, parents): the parents are
 * collected only once a second node waits at q (one node is its own merged node). */
static int scan_add(Interner *x, Ctx *c, int32_t s, int32_t q) {
    int32_t at = map_get(&c->scan, q);
    if (at < 0) {
        if (reserve((void **)&c->entries, &c->entry_cap, c->entry_count, sizeof(Scan), 64)) return -1;
        if (map_put(&c->scan, q, (int32_t)c->entry_count)) return -1;
        if (c->entry_count == c->entry_ready) c->entries[c->entry_ready++].parents = (IntBuf){0};
        Scan *e = &c->entries[c->entry_count++];
        e->q = q;
        e->first = s;
        e->merged = 0;
        e->parents.size = 0;
        return 0;
    }
    Scan *e = &c->entries[at];
    if (!e->merged) {
        if (push_ids(&e->parents, x->par + x->npo[e->first], x->npn[e->first])) return -1;
        e->merged = 1;
    }
    return push_ids(&e->parents, x->par + x->npo[s], x->npn[s]);
}

static int cmp_int32(const void *a, const void *b);

/* The merged node of one scanning entry: `node(q, tuple(sorted(parents)))`. */
static Py_ssize_t scan_node(Interner *x, Scan *e) {
    if (!e->merged) return e->first; /* one node waits here: it is its own merged node */
    int32_t *ids = e->parents.data;
    Py_ssize_t n = e->parents.size, k = n ? 1 : 0;
    qsort(ids, (size_t)n, sizeof(int32_t), cmp_int32);
    for (Py_ssize_t i = 1; i < n; i++) {
        if (ids[i] != ids[k - 1]) ids[k++] = ids[i];
    }
    return node(x, e->q, ids, k, -1);
}

/* A writable view of the array `owner.<name>` holding at least `count` items of `itemsize` bytes (errors
 * name it as `label.<name>`). */
static int array_view(PyObject *owner, const char *label, const char *name, Py_ssize_t itemsize, Py_ssize_t count,
                      Py_buffer *view) {
    PyObject *array = PyObject_GetAttrString(owner, name);
    if (!array) return -1;
    int status = PyObject_GetBuffer(array, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
    Py_DECREF(array);
    if (status) return -1;
    if (view->itemsize != itemsize || view->len < itemsize * count) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s.%s: fewer than %zd items of %zd bytes", label, name, count, itemsize);
        return -1;
    }
    return 0;
}

static void held_release(HeldView *h) {
    if (!h->array) return;
    PyBuffer_Release(&h->view);
    Py_CLEAR(h->array);
}

static void held_free(HeldView *h) {
    held_release(h);
    Py_CLEAR(h->name);
}

/* `array_view` of `owner.<name>`, kept in `h` between calls and taken again only when the
 * attribute is another array (the cores grow their arrays into new ones): numpy's buffer export
 * cost more than the rest of a parser step's bookkeeping. */
static int held_view(HeldView *h, PyObject *owner, const char *label, const char *name, Py_ssize_t itemsize,
                     Py_ssize_t count) {
    if (!h->name && !(h->name = PyUnicode_InternFromString(name))) return -1;
    PyObject *now = PyObject_GetAttr(owner, h->name);
    if (!now) return -1;
    if (now == h->array) {
        Py_DECREF(now);
    } else {
        held_release(h);
        if (PyObject_GetBuffer(now, &h->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)) {
            Py_DECREF(now);
            return -1;
        }
        h->array = now;
    }
    if (h->view.itemsize != itemsize || h->view.len < itemsize * count) {
        held_release(h);
        PyErr_Format(PyExc_ValueError, "%s.%s: fewer than %zd items of %zd bytes", label, name, count, itemsize);
        return -1;
    }
    return 0;
}

/* The new state's entries in the per-state arrays, grown first if needed (`ParserCore._grow`). */
static int mark_state(Interner *x, PyObject *core, Py_ssize_t id, int flag, int has_stacks) {
    if (held_view(&x->held_table, core, "core", "table", sizeof(int32_t), 0)) return -1;
    if (id >= x->held_table.view.len / ((Py_ssize_t)sizeof(int32_t) * x->alphabet)) {
        PyObject *done = PyObject_CallMethod(core, "_grow", NULL);
        if (!done) return -1;
        Py_DECREF(done);
    }
    if (held_view(&x->held_flags, core, "core", "flags", 1, id + 1)) return -1;
    ((uint8_t *)x->held_flags.view.buf)[id] = (uint8_t)flag;
    if (held_view(&x->held_has_stacks, core, "core", "has_stacks", 1, id + 1)) return -1;
    ((uint8_t *)x->held_has_stacks.view.buf)[id] = (uint8_t)has_stacks;
    return 0;
}

/* `ParserCore._intern_state` of the sorted node ids. */
static int32_t intern_state(Interner *x, PyObject *core, const int32_t *ids, Py_ssize_t count, int flag) {
    PyObject *stacks = int_tuple(ids, count);
    if (!stacks) return FAILED;
    PyObject *flag_obj = flag ? Py_True : Py_False;
    PyObject *key = PyTuple_Pack(2, stacks, flag_obj);
    int32_t result = FAILED;
    if (!key) goto done;
    PyObject *found = PyDict_GetItemWithError(x->state_index, key);
    if (found) {
        Py_ssize_t id = as_id(found);
        result = id < 0 ? FAILED : (int32_t)id;
        goto done;
    }
    if (PyErr_Occurred()) goto done;
    Py_ssize_t id = PyList_GET_SIZE(x->state_stacks);
    if (id > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many parser states");
        goto done;
    }
    PyObject *ident = PyLong_FromSsize_t(id);
    int failed = !ident || PyDict_SetItem(x->state_index, key, ident) || PyList_Append(x->state_stacks, stacks) ||
                 PyList_Append(x->state_flag, flag_obj);
    Py_XDECREF(ident);
    if (!failed && !mark_state(x, core, id, flag, count > 0)) result = (int32_t)id;
done:
    Py_XDECREF(key);
    Py_DECREF(stacks);
    return result;
}

static int grammar_too_ambiguous(Py_ssize_t max_stacks) {
    PyObject *errors = PyImport_ImportModule("codemask.errors");
    PyObject *cls = errors ? PyObject_GetAttrString(errors, "GrammarError") : NULL;
    if (cls) {
        PyErr_Format(cls, "grammar is too ambiguous: a parser state exceeds %zd stack nodes", max_stacks);
    }
    Py_XDECREF(cls);
    Py_XDECREF(errors);
    return -1;
}

static int cmp_int32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_uint64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Push the parents of node `s` (at a state where its frame may end), or set the flag for a bottom. */
static int pop_to_parents(Interner *x, Ctx *c, int32_t s, int *flag) {
    for (int32_t i = 0; i < x->npn[s]; i++) {
        int32_t parent = x->par[x->npo[s] + i];
        if (parent < 0) {
            *flag = 1;
        } else if (buf_push(&c->todo, parent)) {
            return -1;
        }
    }
    return 0;
}

/* Push the nodes a popped node `s` (at RTN state `q`) leads to: its calls' callees, and (if its
 * rule may end here) its parents, or the flag for a bottom. */
static int expand(Interner *x, Ctx *c, int32_t s, int32_t q, int *flag) {
    for (int32_t k = x->call_lo[q]; k < x->call_lo[q + 1]; k++) {
        Py_ssize_t callee;
        if (x->tail[k]) {
            callee = node(x, x->callee[k], x->par + x->npo[s], x->npn[s], s);
        } else {
            Py_ssize_t frame = node(x, x->ret[k], x->par + x->npo[s], x->npn[s], s);
            int32_t one = (int32_t)frame;
            callee = frame < 0 ? -1 : node(x, x->callee[k], &one, 1, -1);
        }
        if (callee < 0 || buf_push(&c->todo, (int32_t)callee)) return -1;
    }
    return x->accepting[q] ? pop_to_parents(x, c, s, flag) : 0;
}

/* `expand` of a lazy core (`ParserCore._push_unexpanded`): only calls of rules that may match nothing
 * are stepped over (to the state after them, or the frame's end for a tail call). */
static int expand_lazy(Interner *x, Ctx *c, int32_t s, int32_t q, int *flag) {
    int ends = x->accepting[q];
    for (int32_t k = x->call_lo[q]; k < x->call_lo[q + 1]; k++) {
        if (!x->nullable[x->callee[k]]) continue;
        if (x->tail[k]) {
            ends = 1;
            continue;
        }
        Py_ssize_t frame = node(x, x->ret[k], x->par + x->npo[s], x->npn[s], s);
        if (frame < 0 || buf_push(&c->todo, (int32_t)frame)) return -1;
    }
    return ends ? pop_to_parents(x, c, s, flag) : 0;
}

static int takes(const Interner *x, int32_t q, Py_ssize_t symbol) {
    return (int)(x->first[(Py_ssize_t)q * x->first_words + (symbol >> 6)] >> (symbol & 63) & 1);
}

/* `ParserCore._descend`: the nodes `symbol` moves from state `q` and from what its calls predict,
 * appended to `c->moved`. The parents are node `owner`'s (owner >= 0) or the one frame `single`;
 * `base` names them for the visited pairs. */
static int descend(Interner *x, Ctx *c, int32_t q, int32_t owner, int32_t single, int32_t base, Py_ssize_t symbol,
                   int top) {
    uint64_t key = (uint64_t)(uint32_t)q << 32 | (uint32_t)base;
    if (u64_get(&c->visited, key) != UNKNOWN) return 0;
    if (u64_put(&c->visited, key, 0)) return -1;
    if (c->visited.used > x->max_stacks) return grammar_too_ambiguous(x->max_stacks);
    const int32_t *trans = (const int32_t *)x->trans.buf;
#define PARENTS (owner >= 0 ? x->par + x->npo[owner] : &single), (owner >= 0 ? x->npn[owner] : 1), (owner >= 0 ? owner : -1)
    int32_t target = trans[(Py_ssize_t)q * x->alphabet + symbol];
    if (target >= 0) {
        Py_ssize_t moved = node(x, target, PARENTS);
        if (moved < 0 || buf_push(&c->moved, (int32_t)moved)) return -1;
    }
    for (int32_t k = x->call_lo[q]; k < x->call_lo[q + 1]; k++) {
        int32_t callee = x->callee[k], ret = x->ret[k];
        if (takes(x, callee, symbol)) {
            if (x->tail[k]) {
                if (descend(x, c, callee, owner, single, base, symbol, 0)) return -1;
            } else {
                Py_ssize_t frame = node(x, ret, PARENTS);
                if (frame < 0 || descend(x, c, callee, -1, (int32_t)frame, (int32_t)frame, symbol, 0)) return -1;
            }
        }
        if (!top && !x->tail[k] && x->nullable[callee] && takes(x, ret, symbol) &&
            descend(x, c, ret, owner, single, base, symbol, 0))
            return -1;
    }
#undef PARENTS
    return 0;
}

/* `ParserCore.closure` of nodes `stacks`: the state id, DEAD, or FAILED. */
static int32_t closure(Interner *x, PyObject *core, Ctx *c, const int32_t *stacks, Py_ssize_t count) {
    map_clear(&c->seen);
    map_clear(&c->scan);
    c->todo.size = 0;
    c->ids.size = 0;
    int flag = 0;
    int32_t result = FAILED;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (buf_push(&c->todo, stacks[i])) goto done;
    }
    while (c->todo.size) {
        int32_t s = c->todo.data[--c->todo.size];
        if (map_get(&c->seen, s) >= 0) continue;
        if (map_put(&c->seen, s, 0)) goto done;
        if (c->seen.used > x->max_stacks) {
            grammar_too_ambiguous(x->max_stacks);
            goto done;
        }
        int32_t q;
        Py_ssize_t n;
        if (node_at(x, s, &q, &n)) goto done;
        if ((x->lazy ? x->waits[q] : x->scanning[q]) && scan_add(x, c, s, q)) goto done;
        if ((x->lazy ? expand_lazy(x, c, s, q, &flag) : expand(x, c, s, q, &flag))) goto done;
    }
    if (!c->entry_count && !flag) {
        result = DEAD;
        goto done;
    }
    for (Py_ssize_t i = 0; i < c->entry_count; i++) {
        Py_ssize_t id = scan_node(x, &c->entries[i]);
        if (id < 0 || buf_push(&c->ids, (int32_t)id)) goto done;
    }
    qsort(c->ids.data, (size_t)c->ids.size, sizeof(int32_t), cmp_int32);
    result = intern_state(x, core, c->ids.data, c->ids.size, flag);
done:
    ctx_drop_sets(c);
    return result;
}

/* Group the symbols by their column of the tops' transition rows, classes numbered in order of
 * their first symbol; returns the number of classes. Runs of symbols with the same column (byte
 * ranges) are the common case and skip the hash table. */
static Py_ssize_t group_columns(const Interner *x, Ctx *c, const int32_t *tops, Py_ssize_t count) {
    const int32_t *trans = (const int32_t *)x->trans.buf;
    Py_ssize_t alphabet = x->alphabet;
    if (alphabet < 1) return 0;
    for (Py_ssize_t a = 0; a < alphabet; a++) c->hash[a] = 0x2545F4914F6CDD1Dull;
    memset(c->differs, 0, (size_t)alphabet);
    c->differs[0] = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int32_t *row = trans + (Py_ssize_t)tops[i] * alphabet;
        c->hash[0] = (c->hash[0] ^ (uint32_t)row[0]) * 0x100000001B3ull;
        for (Py_ssize_t a = 1; a < alphabet; a++) {
            c->hash[a] = (c->hash[a] ^ (uint32_t)row[a]) * 0x100000001B3ull;
            c->differs[a] |= row[a] != row[a - 1];
        }
    }
    size_t mask = ((size_t)1 << c->slot_bits) - 1;
    memset(c->slots, 0xFF, (mask + 1) * sizeof(int32_t));
    Py_ssize_t classes = 0;
    for (Py_ssize_t a = 0; a < alphabet; a++) {
        if (!c->differs[a]) {
            c->class_of[a] = c->class_of[a - 1];
            continue;
        }
        uint64_t h = c->hash[a];
        size_t j = (size_t)((h * 0x9E3779B97F4A7C15ull) >> (64 - c->slot_bits));
        int32_t k;
        for (;; j = (j + 1) & mask) {
            k = c->slots[j];
            if (k < 0) {
                k = c->slots[j] = (int32_t)classes;
                c->first_symbol[classes++] = (int32_t)a;
                break;
            }
            Py_ssize_t b = c->first_symbol[k];
            if (c->hash[b] != h) continue;
            Py_ssize_t i = 0;
            while (i < count && trans[(Py_ssize_t)tops[i] * alphabet + a] == trans[(Py_ssize_t)tops[i] * alphabet + b]) i++;
            if (i == count) break;
        }
        c->class_of[a] = k;
    }
    return classes;
}

/* Write `row` (alphabet ints) as `core.table[state]`. */
static int write_row(Interner *x, PyObject *core, Py_ssize_t state, const int32_t *row, int32_t fill) {
    Py_buffer view;
    if (array_view(core, "core", "table", sizeof(int32_t), (state + 1) * x->alphabet, &view)) return -1;
    int32_t *out = (int32_t *)view.buf + state * x->alphabet;
    for (Py_ssize_t a = 0; a < x->alphabet; a++) out[a] = row ? row[a] : fill;
    PyBuffer_Release(&view);
    return 0;
}

/* `ParserCore._fill_row`: one closure per distinct column of the tops' transition rows. */
static int fill_row(Interner *x, PyObject *core, Ctx *c, Py_ssize_t state) {
    if (state < 0 || state >= PyList_GET_SIZE(x->state_stacks)) return index_error("parser state out of range");
    PyObject *stacks = PyList_GET_ITEM(x->state_stacks, state);
    if (!PyTuple_Check(stacks)) {
        PyErr_SetString(PyExc_TypeError, "state stacks must be tuples");
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(stacks);
    if (!count) return write_row(x, core, state, NULL, DEAD);
    int32_t *tops = (int32_t *)malloc((size_t)count * sizeof(int32_t));
    int32_t *nodes = (int32_t *)malloc((size_t)count * sizeof(int32_t));
    int status = -1;
    if (!tops || !nodes) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t s = PyLong_AsSsize_t(PyTuple_GET_ITEM(stacks, i)), n;
        if ((s == -1 && PyErr_Occurred()) || node_at(x, s, &tops[i], &n)) goto done;
        nodes[i] = (int32_t)s;
    }
    Py_ssize_t classes = group_columns(x, c, tops, count);
    const int32_t *trans = (const int32_t *)x->trans.buf;
    for (Py_ssize_t k = 0; k < classes; k++) {
        c->moved.size = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            int32_t t = trans[(Py_ssize_t)tops[i] * x->alphabet + c->first_symbol[k]];
            if (t < 0) continue;
            if (t >= x->states) {
                index_error("RTN transition out of range");
                goto done;
            }
            int32_t s = nodes[i];
            Py_ssize_t moved = node(x, t, x->par + x->npo[s], x->npn[s], s);
            if (moved < 0 || buf_push(&c->moved, (int32_t)moved)) goto done;
        }
        int32_t outcome = c->moved.size ? closure(x, core, c, c->moved.data, c->moved.size) : DEAD;
        if (outcome == FAILED) goto done;
        c->outcome[k] = outcome;
    }
    for (Py_ssize_t a = 0; a < x->alphabet; a++) c->row[a] = c->outcome[c->class_of[a]];
    status = write_row(x, core, state, c->row, 0);
done:
    free(tops);
    free(nodes);
    return status;
}

/* -- the Interner type ------------------------------------------------------------------------ */

static void interner_dealloc(Interner *x) {
    if (x->trans.obj) PyBuffer_Release(&x->trans);
    free(x->scanning);
    free(x->accepting);
    free(x->tail);
    free(x->call_lo);
    free(x->callee);
    free(x->ret);
    free(x->nq);
    free(x->npn);
    free(x->npo);
    free(x->nh);
    free(x->par);
    free(x->slots);
    free(x->waits);
    free(x->nullable);
    free(x->first);
    Py_XDECREF(x->state_stacks);
    Py_XDECREF(x->state_flag);
    Py_XDECREF(x->state_index);
    ctx_free(x->spare);
    held_free(&x->held_table);
    held_free(&x->held_flags);
    held_free(&x->held_has_stacks);
    Py_TYPE(x)->tp_free((PyObject *)x);
}

/* A malloc'd copy of a buffer of `count` items of `itemsize` bytes (ValueError if its size differs). */
static void *copy_array(Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name) {
    if (need(view, itemsize, count, name)) return NULL;
    void *copy = malloc(count ? (size_t)(itemsize * count) : 1);
    if (!copy) return PyErr_NoMemory();
    memcpy(copy, view->buf, (size_t)(itemsize * count));
    return copy;
}

static int check_rtn(Interner *x, Py_ssize_t calls) {
    if (x->call_lo[0] != 0 || x->call_lo[x->states] != calls) return bad("call_lo: not the bounds of the calls");
    for (Py_ssize_t q = 0; q < x->states; q++) {
        if (x->call_lo[q] > x->call_lo[q + 1]) return bad("call_lo: not increasing");
    }
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (x->callee[k] < 0 || x->callee[k] >= x->states || x->ret[k] < 0 || x->ret[k] >= x->states)
            return bad("call to an RTN state out of range");
    }
    const int32_t *trans = (const int32_t *)x->trans.buf;
    for (Py_ssize_t i = 0; i < x->states * x->alphabet; i++) {
        if (trans[i] < -1 || trans[i] >= x->states) return bad("trans: a transition to an RTN state out of range");
    }
    return 0;
}

static PyObject *interner_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"trans", "alphabet", "scanning", "accepting", "call_lo", "callee", "ret", "tail",
                            "state_stacks", "state_flag", "state_index", "max_stacks", "lazy", "waits", "nullable",
                            "first", NULL};
    Py_buffer v[9];
    memset(v, 0, sizeof(v));
    Interner *x = (Interner *)type->tp_alloc(type, 0);
    if (!x) return NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*ny*y*y*y*y*y*O!O!O!npy*y*y*", names, &x->trans, &x->alphabet,
                                     &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &PyList_Type, &x->state_stacks,
                                     &PyList_Type, &x->state_flag, &PyDict_Type, &x->state_index, &x->max_stacks,
                                     &x->lazy, &v[6], &v[7], &v[8])) {
        x->state_stacks = x->state_flag = x->state_index = NULL;
        Py_DECREF(x);
        return NULL;
    }
    Py_INCREF(x->state_stacks);
    Py_INCREF(x->state_flag);
    Py_INCREF(x->state_index);
    x->states = v[0].len;
    Py_ssize_t calls = v[3].len / (Py_ssize_t)sizeof(int32_t);
    int failed = 1;
    if (x->alphabet < 1 || x->trans.len != x->states * x->alphabet * (Py_ssize_t)sizeof(int32_t)) {
        bad("trans: not [states, alphabet] int32");
        goto done;
    }
    if (!(x->scanning = (uint8_t *)copy_array(&v[0], 1, x->states, "scanning")) ||
        !(x->accepting = (uint8_t *)copy_array(&v[1], 1, x->states, "accepting")) ||
        !(x->call_lo = (int32_t *)copy_array(&v[2], sizeof(int32_t), x->states + 1, "call_lo")) ||
        !(x->callee = (int32_t *)copy_array(&v[3], sizeof(int32_t), calls, "callee")) ||
        !(x->ret = (int32_t *)copy_array(&v[4], sizeof(int32_t), calls, "ret")) ||
        !(x->tail = (uint8_t *)copy_array(&v[5], 1, calls, "tail")) || check_rtn(x, calls))
        goto done;
    x->first_words = (x->alphabet + 63) / 64;
    if (!(x->waits = (uint8_t *)copy_array(&v[6], 1, x->states, "waits")) ||
        !(x->nullable = (uint8_t *)copy_array(&v[7], 1, x->states, "nullable")) ||
        !(x->first = (uint64_t *)copy_array(&v[8], sizeof(uint64_t), x->states * x->first_words, "first")))
        goto done;
    if (grow_slots(x)) goto done;
    failed = 0;
done:
    for (int i = 0; i < 9; i++) PyBuffer_Release(&v[i]);
    if (failed) {
        Py_DECREF(x);
        return NULL;
    }
    return (PyObject *)x;
}

/* Node or state ids from a sequence of ints. */
static int read_ids(PyObject *seq, IntBuf *out) {
    PyObject *fast = PySequence_Fast(seq, "expected a sequence of ints");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    out->size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        long value = PyLong_AsLong(items[i]);
        if (value == -1 && PyErr_Occurred()) break;
        if (value < 0 || value > INT32_MAX) {
            index_error("id out of range");
            break;
        }
        if (buf_push(out, (int32_t)value)) break;
    }
    Py_DECREF(fast);
    return PyErr_Occurred() ? -1 : 0;
}

static PyObject *interner_closure(Interner *x, PyObject *args) {
    PyObject *core, *stacks;
    if (!PyArg_ParseTuple(args, "OO", &core, &stacks)) return NULL;
    IntBuf ids = {0};
    Ctx *c = NULL;
    int32_t result = FAILED;
    if (!read_ids(stacks, &ids) && (c = ctx_take(x))) {
        result = closure(x, core, c, ids.data, ids.size);
        ctx_give(x, c);
    }
    free(ids.data);
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

static PyObject *interner_node(Interner *x, PyObject *args) {
    int q;
    PyObject *parents;
    if (!PyArg_ParseTuple(args, "iO!", &q, &PyTuple_Type, &parents)) return NULL;
    if (q < 0 || q >= x->states) return index_error("RTN state out of range"), NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(parents);
    int32_t *ids = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!ids) return PyErr_NoMemory();
    Py_ssize_t id = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        long parent = PyLong_AsLong(PyTuple_GET_ITEM(parents, i));
        if (parent == -1 && PyErr_Occurred()) goto done;
        if (parent < -2 || parent >= x->ncount) {
            index_error("stack node out of range");
            goto done;
        }
        if (i && parent <= ids[i - 1]) {
            bad("parents must be sorted, without repeats");
            goto done;
        }
        ids[i] = (int32_t)parent;
    }
    id = node(x, (int32_t)q, ids, n, -1);
done:
    free(ids);
    return id < 0 ? NULL : PyLong_FromSsize_t(id);
}

/* The node id of a Python int, checked against the interned nodes. */
static int node_arg(Interner *x, PyObject *obj, int32_t *s) {
    long value = PyLong_AsLong(obj);
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value >= x->ncount) return index_error("stack node out of range");
    *s = (int32_t)value;
    return 0;
}

static PyObject *interner_state_of(Interner *x, PyObject *arg) {
    int32_t s;
    return node_arg(x, arg, &s) ? NULL : PyLong_FromLong(x->nq[s]);
}

static PyObject *interner_parents_of(Interner *x, PyObject *arg) {
    int32_t s;
    if (node_arg(x, arg, &s)) return NULL;
    /* a copy first: making the tuple may run the collector, and with it a thread that interns a
     * node and moves `par` */
    int32_t *ids = (int32_t *)malloc((size_t)(x->npn[s] ? x->npn[s] : 1) * sizeof(int32_t));
    if (!ids) return PyErr_NoMemory();
    memcpy(ids, x->par + x->npo[s], (size_t)x->npn[s] * sizeof(int32_t));
    PyObject *parents = int_tuple(ids, x->npn[s]);
    free(ids);
    return parents;
}

/* The RTN states of a sequence of node ids, as a list. */
static PyObject *interner_states_of(Interner *x, PyObject *arg) {
    PyObject *fast = PySequence_Fast(arg, "expected a sequence of node ids");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        int32_t s;
        PyObject *q = node_arg(x, PySequence_Fast_GET_ITEM(fast, i), &s) ? NULL : PyLong_FromLong(x->nq[s]);
        if (!q) Py_CLEAR(out);
        else PyList_SET_ITEM(out, i, q);
    }
    Py_DECREF(fast);
    return out;
}

static PyObject *interner_num_nodes(Interner *x, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromSsize_t(x->ncount);
}

/* `ParserCore._compute_step`: every stack of `state` that takes `symbol` moves, then the closure. */
/* `ParserCore._compute_step` of a valid state and symbol: the closure of the moved stacks, DEAD, or
 * FAILED with an exception set. */
static int32_t step_state(Interner *x, PyObject *core, Py_ssize_t state, Py_ssize_t symbol) {
    PyObject *stacks = PyList_GET_ITEM(x->state_stacks, state);
    if (!PyTuple_Check(stacks)) {
        PyErr_SetString(PyExc_TypeError, "state stacks must be tuples");
        return FAILED;
    }
    Ctx *c = ctx_take(x);
    if (!c) return FAILED;
    const int32_t *trans = (const int32_t *)x->trans.buf;
    int32_t result = FAILED;
    c->moved.size = 0;
    u64_clear(&c->visited);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stacks); i++) {
        int32_t s;
        if (node_arg(x, PyTuple_GET_ITEM(stacks, i), &s)) goto done;
        if (x->lazy) {
            if (descend(x, c, x->nq[s], s, 0, -1 - s, symbol, 1)) goto done;
            continue;
        }
        int32_t t = trans[(Py_ssize_t)x->nq[s] * x->alphabet + symbol];
        if (t < 0) continue;
        Py_ssize_t moved = node(x, t, x->par + x->npo[s], x->npn[s], s);
        if (moved < 0 || buf_push(&c->moved, (int32_t)moved)) goto done;
    }
    result = c->moved.size ? closure(x, core, c, c->moved.data, c->moved.size) : DEAD;
done:
    ctx_give(x, c);
    return result;
}

static PyObject *interner_step(Interner *x, PyObject *args) {
    PyObject *core;
    Py_ssize_t state, symbol;
    if (!PyArg_ParseTuple(args, "Onn", &core, &state, &symbol)) return NULL;
    if (state < 0 || state >= PyList_GET_SIZE(x->state_stacks)) return index_error("parser state out of range"), NULL;
    if (symbol < 0 || symbol >= x->alphabet) return index_error("symbol out of range"), NULL;
    int32_t result = step_state(x, core, state, symbol);
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

static PyObject *interner_fill_rows(Interner *x, PyObject *args) {
    PyObject *core, *states;
    if (!PyArg_ParseTuple(args, "OO", &core, &states)) return NULL;
    if (x->lazy) {
        PyErr_SetString(PyExc_ValueError, "a lazy interner has no rows to fill: each symbol is a step");
        return NULL;
    }
    IntBuf ids = {0};
    Ctx *c = NULL;
    int status = -1;
    if (!read_ids(states, &ids) && (c = ctx_take(x))) {
        status = 0;
        for (Py_ssize_t i = 0; i < ids.size && !status; i++) status = fill_row(x, core, c, ids.data[i]);
        ctx_give(x, c);
    }
    free(ids.data);
    if (status) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef interner_methods[] = {
    {"closure", (PyCFunction)interner_closure, METH_VARARGS,
     "closure(core, stacks) -> state: ParserCore.closure of the node ids `stacks`"},
    {"node", (PyCFunction)interner_node, METH_VARARGS,
     "node(q, parents) -> id: ParserCore.node, the stack node q on top of the sorted tuple of node ids parents"},
    {"fill_rows", (PyCFunction)interner_fill_rows, METH_VARARGS,
     "fill_rows(core, states): ParserCore._fill_row of each state, in order"},
    {"step", (PyCFunction)interner_step, METH_VARARGS,
     "step(core, state, symbol) -> state: ParserCore._compute_step (the closure of the moved stacks, or DEAD)"},
    {"state_of", (PyCFunction)interner_state_of, METH_O, "state_of(node) -> the node's RTN state"},
    {"parents_of", (PyCFunction)interner_parents_of, METH_O, "parents_of(node) -> the node's parents, a sorted tuple"},
    {"states_of", (PyCFunction)interner_states_of, METH_O, "states_of(nodes) -> [the RTN state of each node]"},
    {"num_nodes", (PyCFunction)interner_num_nodes, METH_NOARGS, "num_nodes() -> how many nodes are interned"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject InternerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.Interner",
    .tp_basicsize = sizeof(Interner),
    .tp_dealloc = (destructor)interner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Interner(trans, alphabet, scanning, accepting, call_lo, callee, ret, tail, "
              "state_stacks, state_flag, state_index, max_stacks, lazy, waits, nullable, first): a ParserCore's stack "
              "nodes and closures in C",
    .tp_methods = interner_methods,
    .tp_new = interner_new,
};

/* ---------------------------------------------------------------------------------------------
 * A byte-level position's classification in one pass (`mask_cache.PositionClassifier`).
 *
 * A `PositionWalker` holds one vocabulary's trie in depth-first preorder (`token_trie.PreorderTrie`),
 * the sorted rows' token ids, lengths and bytes, and the trie's exact suffix numbers, all checked
 * once. `classify` scans the trie from a frame-local parser state with the parser state of the
 * current path kept per depth, jumping over a subtree where the parse dies (the lexer's scan, over
 * `ParserCore.table`; transitions not known yet are computed on the way by the core's `Interner`,
 * a row at a time), and gives the position's accepted tokens as a bitmask row and its uncertain
 * tokens, those that leave the frame after `d` bytes where a caller may go on with the residual
 * `token[d:]` (its first byte one the frame may be followed by), with the residuals made distinct
 * by their suffix numbers. The numpy walk of `mask_cache` gives the same sets (the tests compare
 * them); this one is a single C call per position, well under a millisecond where the numpy walk
 * and its bookkeeping took 5-15 ms on a wide position. `resolve` walks a position's distinct
 * residuals from a caller's state and sets the bits of the tokens whose residual it accepts.
 * ------------------------------------------------------------------------------------------- */

enum { PW_BYTE, PW_DEPTH, PW_LO, PW_HI, PW_TOKEN, PW_END, PW_ORDER, PW_LENGTH, PW_SUFFIX_START, PW_SUFFIX_IDS,
       PW_MATRIX, PW_NUM_VIEWS };

/* A subtree with at least this many tokens keeps the set of bytes it holds and its height: where
 * every one of those bytes takes the path's parser state to one same next state, and so on for as
 * many bytes as the subtree is high, every token below is accepted without visiting its nodes,
 * unless a state on that chain may end the frame before a byte that may follow it (then some
 * tokens below are uncertain, and the nodes are visited). A free string's content loops on one
 * state (most of a vocabulary is printable ASCII other than the quote and the backslash); a
 * string of bounded length moves along a chain of states, one per character. */
#define BULK_TOKENS 4
#define STEP_BITS 12
#define CHAIN_MAX 1024
#define CHAIN_LONG (1 << 30)

/* What a walk knows of a parser state it met (`step_info`): the bytes it takes (`alive`), its most
 * common transition target and the bytes that lead there, and along the chain of those targets
 * (while each next state's common bytes include these): how many bytes a path of these bytes can
 * take (`len`, CHAIN_LONG for a loop), the state it then reaches (`end`) and how many of the states
 * on the way may not end the frame (`no_exit`); -1 while not known. */
typedef struct {
    int32_t state, target, len, no_exit, end;
    uint32_t gen;
    uint64_t bytes[4], alive[4];
} StepInfo;

typedef struct {
    PyObject_HEAD
    Py_buffer v[PW_NUM_VIEWS];
    Py_ssize_t nodes, rows, width, nwords, max_depth;
    uint32_t *ok_stamp; /* per row: the generation in which the current walk accepted it */
    uint32_t gen;
    int32_t *path;      /* per depth: the parser state after the current path's prefix */
    int busy;           /* a walk is running (a transition it computes may run Python code) */
    /* per node with at least BULK_TOKENS tokens below it: the index of the bytes its subtree holds
     * (-1 for the others), and those bytes as 256-bit sets (`bulk_bytes`, four words each) */
    int32_t *bulk_of, *bulk_height;
    uint64_t *bulk_bytes;
    /* per walk: the states it met (`step_info`), open addressing by state, stamped by walk; full,
     * a walk visits its nodes one by one */
    StepInfo *steps;
    Py_ssize_t steps_used;
    int32_t *roots;     /* the first-level nodes (depth 1), in order */
    Py_ssize_t nroots;
} PositionWalker;

/* The parser core's transition table and per-state flags, taken again after a row is filled (the
 * core grows them into new arrays). */
typedef struct {
    const int32_t *table;
    const uint8_t *flags, *has_stacks;
    Py_ssize_t states;
} CoreView;

static int core_view(Interner *x, PyObject *core, CoreView *v) {
    Py_ssize_t states = PyList_GET_SIZE(x->state_stacks);
    if (held_view(&x->held_table, core, "core", "table", sizeof(int32_t), states * x->alphabet) ||
        held_view(&x->held_flags, core, "core", "flags", 1, states) ||
        held_view(&x->held_has_stacks, core, "core", "has_stacks", 1, states))
        return -1;
    v->table = (const int32_t *)x->held_table.view.buf;
    v->flags = (const uint8_t *)x->held_flags.view.buf;
    v->has_stacks = (const uint8_t *)x->held_has_stacks.view.buf;
    v->states = states;
    return 0;
}

/* `ParserCore.step` of a live state for the walks: the memoised transition, the state's whole row
 * filled where it is not known yet (`fill_row`); FAILED with an exception set. */
static int32_t core_step(Interner *x, PyObject *core, CoreView *v, int32_t state, uint8_t byte) {
    if (state < 0 || state >= v->states) return bad("parser state out of range"), FAILED;
    int32_t next = v->table[(Py_ssize_t)state * 256 + byte];
    if (next == UNKNOWN) {
        Ctx *c = ctx_take(x);
        if (!c) return FAILED;
        int status = fill_row(x, core, c, state);
        ctx_give(x, c);
        if (status || core_view(x, core, v)) return FAILED;
        next = v->table[(Py_ssize_t)state * 256 + byte];
    }
    if (next < DEAD || next >= v->states) return bad("transition to a parser state out of range"), FAILED;
    return next;
}

static void pwalker_dealloc(PositionWalker *w) {
    for (int i = 0; i < PW_NUM_VIEWS; i++) {
        if (w->v[i].obj) PyBuffer_Release(&w->v[i]);
    }
    free(w->ok_stamp);
    free(w->path);
    free(w->bulk_of);
    free(w->bulk_height);
    free(w->bulk_bytes);
    free(w->steps);
    free(w->roots);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

/* `bulk_of`, `bulk_bytes` and `bulk_height`: a node's byte set is its own byte and its children's
 * sets, and its height one more than its highest child's, so one backward pass over the preorder
 * computes them all (for every node in scratch, then kept for the nodes with enough tokens below). */
static int pwalker_bulk(PositionWalker *w) {
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf, *end = w->v[PW_END].buf;
    Py_ssize_t n = w->nodes, kept = 0;
    uint64_t *all = (uint64_t *)malloc((size_t)(n ? n : 1) * 4 * sizeof(uint64_t));
    int32_t *height = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    w->bulk_of = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!all || !height || !w->bulk_of) {
        free(all);
        free(height);
        return PyErr_NoMemory(), -1;
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        uint64_t *set = all + 4 * i;
        memset(set, 0, 4 * sizeof(uint64_t));
        set[byte[i] >> 6] |= (uint64_t)1 << (byte[i] & 63);
        height[i] = 1;
        for (Py_ssize_t c = i + 1; c < end[i]; c = end[c]) {
            for (int k = 0; k < 4; k++) set[k] |= all[4 * c + k];
            if (height[c] + 1 > height[i]) height[i] = height[c] + 1;
        }
        w->bulk_of[i] = -1;
        if (hi[i] - lo[i] >= BULK_TOKENS) kept++;
    }
    w->bulk_bytes = (uint64_t *)malloc((size_t)(kept ? kept : 1) * 4 * sizeof(uint64_t));
    w->bulk_height = (int32_t *)malloc((size_t)(kept ? kept : 1) * sizeof(int32_t));
    if (!w->bulk_bytes || !w->bulk_height) {
        free(all);
        free(height);
        return PyErr_NoMemory(), -1;
    }
    kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hi[i] - lo[i] < BULK_TOKENS) continue;
        memcpy(w->bulk_bytes + 4 * kept, all + 4 * i, 4 * sizeof(uint64_t));
        w->bulk_height[kept] = height[i];
        w->bulk_of[i] = (int32_t)kept++;
    }
    free(all);
    free(height);
    return 0;
}

/* The walk's record of live state `state` (its row filled first where it is not known yet); NULL
 * with an exception set on error, or with none when the records are full. */
static StepInfo *step_info(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t state) {
    size_t mask = ((size_t)1 << STEP_BITS) - 1, i = ((uint32_t)state * 2654435761u) & mask;
    for (; w->steps[i].gen == w->gen; i = (i + 1) & mask) {
        if (w->steps[i].state == state) return &w->steps[i];
    }
    if (2 * w->steps_used >= (Py_ssize_t)mask) return NULL;
    const int32_t *row = v->table + (Py_ssize_t)state * 256;
    for (int b = 0; b < 256; b++) {
        if (row[b] != UNKNOWN) continue;
        if (core_step(x, core, v, state, (uint8_t)b) == FAILED) return NULL;
        row = v->table + (Py_ssize_t)state * 256; /* (the view may have moved) */
    }
    /* the most common target: count each run of equal targets into a short list of targets */
    int32_t targets[256], counts[256];
    int distinct = 0;
    for (int b = 0; b < 256; b++) {
        int32_t t = row[b];
        if (t < 0) continue;
        int k = 0;
        while (k < distinct && targets[k] != t) k++;
        if (k == distinct) {
            targets[k] = t;
            counts[k] = 0;
            distinct++;
        }
        counts[k]++;
    }
    StepInfo *e = &w->steps[i];
    e->state = state;
    e->target = DEAD;
    e->len = e->no_exit = e->end = -1;
    e->gen = w->gen;
    memset(e->bytes, 0, sizeof(e->bytes));
    memset(e->alive, 0, sizeof(e->alive));
    for (int b = 0; b < 256; b++) {
        if (row[b] >= 0) e->alive[b >> 6] |= (uint64_t)1 << (b & 63);
    }
    for (int k = 0, best = 0; k < distinct; k++) {
        if (counts[k] > best) {
            best = counts[k];
            e->target = targets[k];
        }
    }
    for (int b = 0; e->target >= 0 && b < 256; b++) {
        if (row[b] == e->target) e->bytes[b >> 6] |= (uint64_t)1 << (b & 63);
    }
    w->steps_used++;
    return e;
}

static int subset_of(const uint64_t *a, const uint64_t *b) {
    return !(a[0] & ~b[0]) && !(a[1] & ~b[1]) && !(a[2] & ~b[2]) && !(a[3] & ~b[3]);
}

static int meets(const uint64_t *a, const uint64_t *b) {
    return (a[0] & b[0]) || (a[1] & b[1]) || (a[2] & b[2]) || (a[3] & b[3]);
}

/* `len` and `no_exit` of `e` (and of the states along its chain): the chain is followed to its end
 * or to a state already known, then filled back. 0 done, -1 on error (an exception is set). */
static int chain_info(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, StepInfo *e) {
    StepInfo *chain[CHAIN_MAX];
    int k = 0;
    chain[0] = e;
    while (k + 1 < CHAIN_MAX) {
        StepInfo *c = chain[k];
        if (c->target < 0 || c->target == c->state) break;
        StepInfo *t = step_info(w, x, core, v, c->target);
        if (!t) {
            if (PyErr_Occurred()) return -1;
            break;
        }
        if (!subset_of(c->bytes, t->bytes) || t->len >= 0) break;
        chain[++k] = t;
    }
    for (; k >= 0; k--) {
        StepInfo *c = chain[k];
        if (c->target < 0) {
            c->len = c->no_exit = 0;
            c->end = c->state;
            continue;
        }
        int flagged = v->flags[c->target];
        if (c->target == c->state) {
            c->len = CHAIN_LONG;
            c->no_exit = flagged ? 0 : CHAIN_LONG;
            c->end = c->state;
            continue;
        }
        int32_t len = 0, no_exit = 0;
        /* the next state's record, when the chain goes on through it */
        size_t mask = ((size_t)1 << STEP_BITS) - 1, i = ((uint32_t)c->target * 2654435761u) & mask;
        StepInfo *next = NULL;
        for (; w->steps[i].gen == w->gen; i = (i + 1) & mask) {
            if (w->steps[i].state == c->target) {
                next = &w->steps[i];
                break;
            }
        }
        c->end = c->target;
        if (next && next->len >= 0 && subset_of(c->bytes, next->bytes)) {
            len = next->len;
            no_exit = next->no_exit;
            c->end = next->end;
        }
        c->len = len >= CHAIN_LONG - 1 ? CHAIN_LONG : len + 1;
        c->no_exit = flagged ? 0 : (no_exit >= CHAIN_LONG - 1 ? CHAIN_LONG : no_exit + 1);
    }
    return 0;
}

/* How many bytes below a node (with byte set `bytes` and height `height`, entered from `state`)
 * every path takes uniformly, all of them accepted and then none (see BULK_TOKENS): the tokens
 * below the node are then accepted exactly when they are at most that long, and no token below
 * leaves the frame where a residual could be kept; -1 where this does not hold (the nodes are then
 * visited one by one), -2 on error (an exception is set). `follow_bits` are the bytes a residual
 * may begin with (NULL: exits are not kept). */
static int32_t bulk_reach(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t state,
                          const uint64_t *bytes, int32_t height, const uint64_t *follow_bits) {
    StepInfo *e = step_info(w, x, core, v, state);
    if (!e) return PyErr_Occurred() ? -2 : -1;
    if (e->target < 0 || !subset_of(bytes, e->bytes)) return -1;
    if (e->len < 0 && chain_info(w, x, core, v, e)) return -2;
    int32_t reach = e->len < height ? e->len : height;
    if (follow_bits && meets(bytes, follow_bits) && e->no_exit < (reach < height - 1 ? reach : height - 1)) return -1;
    if (reach == height) return reach;
    StepInfo *last = step_info(w, x, core, v, e->end); /* where the chain ends: every byte below must die */
    if (!last) return PyErr_Occurred() ? -2 : -1;
    return meets(bytes, last->alive) ? -1 : reach;
}

/* The arrays' shapes and every index they hold, checked once: the walks then read them unchecked. */
static int pwalker_check(PositionWalker *w) {
    Py_ssize_t n = w->v[PW_BYTE].len, rows = w->v[PW_ORDER].len / (Py_ssize_t)sizeof(int32_t);
    for (int i = PW_DEPTH; i <= PW_END; i++) {
        if (need(&w->v[i], sizeof(int32_t), n, "trie array")) return -1;
    }
    if (need(&w->v[PW_ORDER], sizeof(int32_t), rows, "order") ||
        need(&w->v[PW_LENGTH], sizeof(int32_t), rows, "lengths") ||
        need(&w->v[PW_SUFFIX_START], sizeof(int64_t), rows + 1, "suffix_start"))
        return -1;
    const int32_t *depth = w->v[PW_DEPTH].buf, *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf;
    const int32_t *token = w->v[PW_TOKEN].buf, *end = w->v[PW_END].buf, *order = w->v[PW_ORDER].buf;
    const int32_t *length = w->v[PW_LENGTH].buf;
    const int64_t *start = w->v[PW_SUFFIX_START].buf;
    Py_ssize_t ids = w->v[PW_SUFFIX_IDS].len / (Py_ssize_t)sizeof(int64_t);
    if (need(&w->v[PW_SUFFIX_IDS], sizeof(int64_t), ids, "suffix_ids")) return -1;
    if (w->width < 1 || need(&w->v[PW_MATRIX], 1, rows * w->width, "matrix")) return -1;
    w->max_depth = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (depth[i] < 1 || end[i] <= i || end[i] > n || lo[i] < 0 || lo[i] > hi[i] || hi[i] > rows ||
            token[i] < -1 || token[i] >= rows || (i + 1 < n && depth[i + 1] > depth[i] + 1) || (i == 0 && depth[0] != 1))
            return bad("trie arrays: a depth, subtree end, token or row range out of order");
        if (depth[i] > w->max_depth) w->max_depth = depth[i];
    }
    if (start[0] != 0 || start[rows] != ids) return bad("suffix_start: not the bounds of the suffix ids");
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (order[r] < 0 || order[r] / 32 >= w->nwords) return bad("order: a token id past the bitmask row");
        if (length[r] < 1 || length[r] > w->width || start[r + 1] - start[r] != length[r])
            return bad("lengths: a token length out of the matrix or the suffix ids");
    }
    w->nodes = n;
    w->rows = rows;
    return 0;
}

static PyObject *pwalker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"byte", "depth", "lo", "hi", "token", "end", "order", "lengths", "suffix_start",
                            "suffix_ids", "matrix", "width", "words", NULL};
    PositionWalker *w = (PositionWalker *)type->tp_alloc(type, 0);
    if (!w) return NULL;
    Py_buffer *v = w->v;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*y*y*y*y*y*y*y*y*y*y*nn", names, &v[0], &v[1], &v[2], &v[3],
                                     &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &w->width, &w->nwords) ||
        pwalker_check(w)) {
        Py_DECREF(w);
        return NULL;
    }
    w->ok_stamp = (uint32_t *)calloc((size_t)(w->rows ? w->rows : 1), sizeof(uint32_t));
    w->path = (int32_t *)malloc((size_t)(w->max_depth + 1) * sizeof(int32_t));
    if (!w->ok_stamp || !w->path) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    w->steps = (StepInfo *)calloc((size_t)1 << STEP_BITS, sizeof(StepInfo));
    if (!w->steps) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    if (pwalker_bulk(w)) {
        Py_DECREF(w);
        return NULL;
    }
    const int32_t *depth = w->v[PW_DEPTH].buf;
    w->roots = (int32_t *)malloc(257 * sizeof(int32_t));
    if (!w->roots) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < w->nodes; i++) {
        if (depth[i] != 1) continue;
        if (w->nroots == 256) {
            Py_DECREF(w);
            return bad("trie arrays: more than 256 first-level nodes"), NULL;
        }
        w->roots[w->nroots++] = (int32_t)i;
    }
    return (PyObject *)w;
}

/* The interner argument of a walk: a byte-level core's (calls expanded). */
static Interner *walk_interner(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &InternerType)) {
        PyErr_SetString(PyExc_TypeError, "expected a ParserCore's native Interner");
        return NULL;
    }
    Interner *x = (Interner *)obj;
    if (x->alphabet != 256 || x->lazy) {
        bad("position walks need a byte-level parser core with its calls expanded");
        return NULL;
    }
    return x;
}

/* Residual tails made distinct by suffix number: an open-addressing map from number to residual. */
typedef struct {
    int64_t *key;
    int32_t *value;
    size_t mask;
} SuffixMap;

static int suffix_map_init(SuffixMap *m, Py_ssize_t items) {
    size_t size = 16;
    while (size < 2 * (size_t)items) size *= 2;
    m->key = (int64_t *)malloc(size * sizeof(int64_t));
    m->value = (int32_t *)malloc(size * sizeof(int32_t));
    m->mask = size - 1;
    if (!m->key || !m->value) return PyErr_NoMemory(), -1;
    memset(m->key, 0xFF, size * sizeof(int64_t));
    return 0;
}

/* The residual numbered `key`: its index, or `fresh` (recorded) if it is new. */
static int32_t suffix_map_get(SuffixMap *m, int64_t key, int32_t fresh) {
    size_t i = (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
    for (; m->key[i] >= 0; i = (i + 1) & m->mask) {
        if (m->key[i] == key) return m->value[i];
    }
    m->key[i] = key;
    m->value[i] = fresh;
    return fresh;
}

/* ---- a parser core's memo of trie walks below first bytes (`WalkMemo`) ---- */

/* A first-level group at least this large (in tokens) reads its subtrees from the memo: positions
 * of one rule very often reach one parser state after their first byte (every branch of a key
 * complement goes on as the same free string), and what lies below depends only on that state. */
#define MEMO_MIN_ROWS 4096
#define MEMO_ENTRIES 96
#define MEMO_PER_WALK 32 /* (at most: groups of MEMO_MIN_ROWS tokens each in a 128k vocabulary) */

/* The walks below first-level nodes from one parser state (reached by their byte): per root whether
 * it was walked, the accepted rows as a bitmap over the sorted rows and as a token-id bitmask, and
 * the exits found, (root, node, depth) triples. */
typedef struct {
    int32_t state;
    uint64_t follow[4]; /* the bytes a residual may begin with when it was walked (all: none kept) */
    int has_follow;
    uint8_t done[256];
    uint64_t *rows;
    uint32_t *words;
    Py_ssize_t done_rows;
    IntBuf exits;
} MemoEntry;

typedef struct {
    PyObject_HEAD
    MemoEntry *entries;
    Py_ssize_t count;
} WalkMemo;

static void memo_clear(WalkMemo *m) {
    for (Py_ssize_t k = 0; k < m->count; k++) {
        free(m->entries[k].rows);
        free(m->entries[k].words);
        free(m->entries[k].exits.data);
    }
    m->count = 0;
}

static void walkmemo_dealloc(WalkMemo *m) {
    memo_clear(m);
    free(m->entries);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static PyObject *walkmemo_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "", names)) return NULL;
    WalkMemo *m = (WalkMemo *)type->tp_alloc(type, 0);
    if (!m) return NULL;
    m->entries = (MemoEntry *)calloc(MEMO_ENTRIES, sizeof(MemoEntry));
    if (!m->entries) {
        Py_DECREF(m);
        return PyErr_NoMemory();
    }
    return (PyObject *)m;
}

static void memo_room(WalkMemo *m) {
    if (m->count > MEMO_ENTRIES - MEMO_PER_WALK) memo_clear(m);
}

static PyObject *walkmemo_get_entries(WalkMemo *m, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(m->count);
}

static PyGetSetDef walkmemo_getset[] = {
    {"entries", (getter)walkmemo_get_entries, NULL, "how many parser states' walks it holds", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WalkMemoType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.WalkMemo",
    .tp_basicsize = sizeof(WalkMemo),
    .tp_dealloc = (destructor)walkmemo_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "WalkMemo(): one parser core's memo of trie walks below first bytes, for PositionWalker.classify",
    .tp_getset = walkmemo_getset,
    .tp_new = walkmemo_new,
};

/* The memo's entry of `state` walked with `follow_bits` (NULL: exits not kept), made empty if new;
 * NULL if the memo is full (no exception: the caller walks directly) or on memory error. A walk
 * empties a nearly full memo before it starts (`memo_room`), so that no entry it reads is freed. */
static MemoEntry *memo_entry(WalkMemo *m, PositionWalker *w, int32_t state, const uint64_t *follow_bits) {
    for (Py_ssize_t k = 0; k < m->count; k++) {
        MemoEntry *e = &m->entries[k];
        if (e->state == state && e->has_follow == (follow_bits != NULL) &&
            (!follow_bits || !memcmp(e->follow, follow_bits, sizeof(e->follow))))
            return e;
    }
    if (m->count == MEMO_ENTRIES) return NULL;
    MemoEntry *e = &m->entries[m->count];
    memset(e, 0, sizeof(*e));
    e->rows = (uint64_t *)calloc((size_t)(w->rows / 64 + 1), sizeof(uint64_t));
    e->words = (uint32_t *)calloc((size_t)w->nwords, sizeof(uint32_t));
    if (!e->rows || !e->words) {
        free(e->rows);
        free(e->words);
        return (MemoEntry *)PyErr_NoMemory();
    }
    e->state = state;
    e->has_follow = follow_bits != NULL;
    if (follow_bits) memcpy(e->follow, follow_bits, sizeof(e->follow));
    m->count++;
    return e;
}

/* Where a walk records what it finds: accepted tokens into `words`, and per row either a stamp
 * (`w->ok_stamp`, a walk of its own) or a bit of a memo entry's `rows`; exits into `exits` as
 * (root, node, depth) triples. */
typedef struct {
    uint32_t *words;
    uint64_t *rows; /* NULL: stamps */
    IntBuf *exits;
    int32_t root;
    int keep_exits;
    const uint64_t *follow_bits; /* the bytes exits may continue with, for the bulk test (NULL: none kept) */
} Sink;

static void sink_ok(PositionWalker *w, const Sink *k, int32_t row) {
    const int32_t *order = w->v[PW_ORDER].buf;
    int32_t id = order[row];
    k->words[id >> 5] |= (uint32_t)1 << (id & 31);
    if (k->rows) {
        k->rows[row >> 6] |= (uint64_t)1 << (row & 63);
    } else {
        w->ok_stamp[row] = w->gen;
    }
}

/* The scan of the preorder nodes `begin`..`stop` (a run of whole subtrees whose parent's state is
 * `w->path[depth[begin] - 1]`), recording into `k`; 0, or -1 on error. */
static int walk_nodes(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, Py_ssize_t begin, Py_ssize_t stop,
                      const Sink *k) {
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *depth = w->v[PW_DEPTH].buf, *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf;
    const int32_t *token = w->v[PW_TOKEN].buf, *end = w->v[PW_END].buf, *length = w->v[PW_LENGTH].buf;
    for (Py_ssize_t i = begin; i < stop;) {
        int32_t d = depth[i];
        int32_t bulk = w->bulk_of[i];
        if (bulk >= 0) {
            int32_t height = w->bulk_height[bulk];
            int32_t reach = bulk_reach(w, x, core, v, w->path[d - 1], w->bulk_bytes + 4 * (Py_ssize_t)bulk, height,
                                       k->keep_exits ? k->follow_bits : NULL);
            if (reach == -2) return -1;
            if (reach >= 0) {
                int32_t longest = d - 1 + reach; /* the tokens below at most this long are accepted */
                for (int32_t row = lo[i]; row < hi[i]; row++) {
                    if (reach < height && length[row] > longest) continue;
                    sink_ok(w, k, row);
                }
                i = end[i];
                continue;
            }
        }
        int32_t next = v->table[(Py_ssize_t)w->path[d - 1] * 256 + byte[i]];
        if (next == UNKNOWN || next >= v->states || next < DEAD) {
            next = core_step(x, core, v, w->path[d - 1], byte[i]);
            if (next == FAILED) return -1;
        }
        if (next < 0) {
            i = end[i];
            continue;
        }
        if (token[i] >= 0) sink_ok(w, k, token[i]);
        if (k->keep_exits && v->flags[next] && end[i] > i + 1 &&
            (buf_push(k->exits, k->root) || buf_push(k->exits, (int32_t)i) || buf_push(k->exits, d)))
            return -1;
        if (v->has_stacks[next]) {
            w->path[d] = next;
            i++;
        } else {
            i = end[i];
        }
    }
    return 0;
}

/* Walk the subtrees below the roots `r` of `group` (whose byte led to memo entry `e`'s state) that
 * the entry has not walked yet. */
static int memo_fill(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, MemoEntry *e, const int32_t *group,
                     Py_ssize_t count) {
    const int32_t *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf, *token = w->v[PW_TOKEN].buf;
    const int32_t *end = w->v[PW_END].buf;
    Sink k = {e->words, e->rows, &e->exits, -1, 1, e->has_follow ? e->follow : NULL};
    k.keep_exits = e->has_follow;
    for (Py_ssize_t g = 0; g < count; g++) {
        int32_t r = group[g], i = w->roots[r];
        if (e->done[r]) continue;
        e->done[r] = 1;
        e->done_rows += hi[i] - lo[i];
        k.root = r;
        if (token[i] >= 0) sink_ok(w, &k, token[i]);
        if (k.keep_exits && v->flags[e->state] && end[i] > i + 1 &&
            (buf_push(&e->exits, r) || buf_push(&e->exits, i) || buf_push(&e->exits, 1)))
            return -1;
        if (!v->has_stacks[e->state] || end[i] <= i + 1) continue;
        w->path[1] = e->state;
        if (walk_nodes(w, x, core, v, i + 1, end[i], &k)) return -1;
    }
    return 0;
}

/* Add to `words` the accepted tokens below the roots of `group` from memo entry `e` (all walked): the
 * entry's token bitmask less its other roots' tokens where the group holds most of it, else bit by
 * bit from its rows. */
static int memo_read(PositionWalker *w, MemoEntry *e, const int32_t *group, Py_ssize_t count, uint32_t *words) {
    const int32_t *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf, *order = w->v[PW_ORDER].buf;
    uint8_t in_group[256] = {0};
    Py_ssize_t rows = 0;
    for (Py_ssize_t g = 0; g < count; g++) {
        in_group[group[g]] = 1;
        rows += hi[w->roots[group[g]]] - lo[w->roots[group[g]]];
    }
    if (2 * rows >= e->done_rows) {
        uint32_t *mask = (uint32_t *)malloc((size_t)w->nwords * sizeof(uint32_t));
        if (!mask) return PyErr_NoMemory(), -1;
        memcpy(mask, e->words, (size_t)w->nwords * sizeof(uint32_t));
        for (Py_ssize_t r = 0; r < w->nroots; r++) {
            if (!e->done[r] || in_group[r]) continue;
            int32_t i = w->roots[r];
            for (int32_t row = lo[i]; row < hi[i]; row++) {
                if (e->rows[row >> 6] >> (row & 63) & 1) mask[order[row] >> 5] &= ~((uint32_t)1 << (order[row] & 31));
            }
        }
        for (Py_ssize_t j = 0; j < w->nwords; j++) words[j] |= mask[j];
        free(mask);
        return 0;
    }
    for (Py_ssize_t g = 0; g < count; g++) {
        int32_t i = w->roots[group[g]];
        for (int32_t row = lo[i]; row < hi[i]; row++) {
            if (e->rows[row >> 6] >> (row & 63) & 1) words[order[row] >> 5] |= (uint32_t)1 << (order[row] & 31);
        }
    }
    return 0;
}

/* classify(interner, core, start, follow, max_uncertain, memo) -> (words, rows, residual_of, residual_rows,
 * residual_starts, residual_lengths): the scan described above from parser state `start`; `follow`
 * (256 bytes of 0/1) are the bytes a residual may begin with, or None where the frame has no caller
 * (no token is then uncertain). `words` is the uint32 bitmask row of the accepted tokens' ids; the
 * others are int32 arrays: the uncertain tokens' rows and the distinct residual each continues
 * with, and per residual the row it is a tail of, where it starts, and its length; or None alone
 * where more than `max_uncertain` tokens leave the frame (they are then not listed). From a real
 * parse's state with `follow` None, `words` is that state's mask of the vocabulary. `memo` (a
 * WalkMemo of this core, or None) keeps the walks below first bytes that lead many tokens to one
 * state, for later positions that reach it too. */
static PyObject *pwalker_classify(PositionWalker *w, PyObject *args) {
    PyObject *interner, *core, *follow_obj, *memo_obj;
    int start;
    Py_ssize_t max_uncertain;
    if (!PyArg_ParseTuple(args, "OOiOnO", &interner, &core, &start, &follow_obj, &max_uncertain, &memo_obj)) return NULL;
    Interner *x = walk_interner(interner);
    if (!x) return NULL;
    const uint8_t *follow = NULL;
    if (follow_obj != Py_None) {
        if (!PyBytes_Check(follow_obj) || PyBytes_GET_SIZE(follow_obj) != 256) {
            PyErr_SetString(PyExc_TypeError, "follow: 256 bytes of 0/1, or None");
            return NULL;
        }
        follow = (const uint8_t *)PyBytes_AS_STRING(follow_obj);
    }
    WalkMemo *memo = NULL;
    if (memo_obj != Py_None) {
        if (!PyObject_TypeCheck(memo_obj, &WalkMemoType)) {
            PyErr_SetString(PyExc_TypeError, "memo: a WalkMemo or None");
            return NULL;
        }
        memo = (WalkMemo *)memo_obj;
    }
    if (w->busy) {
        PyErr_SetString(PyExc_RuntimeError, "PositionWalker.classify re-entered (take the core's lock)");
        return NULL;
    }
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf, *token = w->v[PW_TOKEN].buf, *end = w->v[PW_END].buf;
    const int32_t *length = w->v[PW_LENGTH].buf;
    const int64_t *suffix_start = w->v[PW_SUFFIX_START].buf, *suffix_ids = w->v[PW_SUFFIX_IDS].buf;
    PyObject *words_out = NULL, *result = NULL;
    IntBuf exits = {0}, unc[5];
    memset(unc, 0, sizeof(unc));
    SuffixMap map = {0};
    CoreView v;
    MemoEntry *used[256];
    Py_ssize_t nused = 0;
    w->busy = 1;
    if (core_view(x, core, &v)) goto done;
    if (start < 0 || start >= v.states) {
        bad("parser state out of range");
        goto done;
    }
    words_out = PyBytes_FromStringAndSize(NULL, w->nwords * (Py_ssize_t)sizeof(uint32_t));
    if (!words_out) goto done;
    uint32_t *words = (uint32_t *)PyBytes_AS_STRING(words_out);
    memset(words, 0, (size_t)w->nwords * sizeof(uint32_t));
    if (++w->gen == 0) {
        memset(w->ok_stamp, 0, (size_t)w->rows * sizeof(uint32_t));
        for (Py_ssize_t k = 0; k < ((Py_ssize_t)1 << STEP_BITS); k++) w->steps[k].gen = 0;
        w->gen = 1;
    }
    uint32_t gen = w->gen;
    w->steps_used = 0;
    for (Py_ssize_t d = 0; d <= w->max_depth; d++) w->path[d] = start; /* (every entry a valid state) */
    uint64_t follow_bits[4] = {0, 0, 0, 0};
    for (int b = 0; follow && b < 256; b++) {
        if (follow[b]) follow_bits[b >> 6] |= (uint64_t)1 << (b & 63);
    }
    if (memo) memo_room(memo);
    Sink direct = {words, NULL, &exits, -1, follow != NULL, follow ? follow_bits : NULL};
    /* the first byte of every root, then its subtree: directly, or through the memo where the roots
     * that reach one state hold many tokens */
    int32_t target[256], group[256], placed[256] = {0};
    for (Py_ssize_t r = 0; r < w->nroots; r++) {
        target[r] = core_step(x, core, &v, start, byte[w->roots[r]]);
        if (target[r] == FAILED) goto done;
    }
    for (Py_ssize_t r = 0; r < w->nroots; r++) {
        if (target[r] < 0 || placed[r]) continue;
        Py_ssize_t count = 0, rows = 0;
        for (Py_ssize_t q = r; q < w->nroots; q++) {
            if (target[q] != target[r]) continue;
            placed[q] = 1;
            group[count++] = (int32_t)q;
            rows += hi[w->roots[q]] - lo[w->roots[q]];
        }
        MemoEntry *e = NULL;
        if (memo && rows >= MEMO_MIN_ROWS && v.has_stacks[target[r]]) {
            e = memo_entry(memo, w, target[r], follow ? follow_bits : NULL);
            if (!e && PyErr_Occurred()) goto done;
        }
        if (e) {
            if (memo_fill(w, x, core, &v, e, group, count) || memo_read(w, e, group, count, words)) goto done;
            used[nused] = e;
            for (Py_ssize_t k = 0; k < e->exits.size; k += 3) {
                int32_t root = e->exits.data[k];
                int in_group = 0;
                for (Py_ssize_t g = 0; g < count && !in_group; g++) in_group = group[g] == root;
                if (in_group && (buf_push(&exits, (int32_t)(256 + nused)) || buf_push(&exits, e->exits.data[k + 1]) ||
                                 buf_push(&exits, e->exits.data[k + 2])))
                    goto done;
            }
            nused++;
            continue;
        }
        for (Py_ssize_t g = 0; g < count; g++) {
            int32_t i = w->roots[group[g]], t = target[group[g]];
            if (token[i] >= 0) sink_ok(w, &direct, token[i]);
            if (follow && v.flags[t] && end[i] > i + 1 &&
                (buf_push(&exits, -1) || buf_push(&exits, i) || buf_push(&exits, 1)))
                goto done;
            if (!v.has_stacks[t] || end[i] <= i + 1) continue;
            w->path[1] = t;
            if (walk_nodes(w, x, core, &v, i + 1, end[i], &direct)) goto done;
        }
    }
    /* the exits: the tokens below each exit node, by child, where the residual's first byte may
     * follow the frame and the token is not accepted outright (rows read from the memo entry that
     * holds the exit's subtree, else from this walk's stamps) */
    Py_ssize_t count = 0;
    for (Py_ssize_t k = 0; follow && k < exits.size; k += 3) {
        int32_t i = exits.data[k + 1];
        for (int32_t c = i + 1; c < end[i]; c = end[c]) {
            if (follow[byte[c]]) count += hi[c] - lo[c];
        }
    }
    if (count > max_uncertain) {
        result = Py_BuildValue("(NO)", words_out, Py_None);
        words_out = NULL;
        goto done;
    }
    if (suffix_map_init(&map, count)) goto done;
    for (Py_ssize_t k = 0; follow && k < exits.size; k += 3) {
        int32_t source = exits.data[k], i = exits.data[k + 1], d = exits.data[k + 2];
        const uint64_t *ok_rows = source >= 256 ? used[source - 256]->rows : NULL;
        for (int32_t c = i + 1; c < end[i]; c = end[c]) {
            if (!follow[byte[c]]) continue;
            for (int32_t row = lo[c]; row < hi[c]; row++) {
                if (ok_rows ? (ok_rows[row >> 6] >> (row & 63) & 1) : w->ok_stamp[row] == gen) continue;
                if (d >= length[row]) {
                    bad("trie arrays: a token below a node is not longer than the node's prefix");
                    goto done;
                }
                int32_t fresh = (int32_t)unc[2].size;
                int32_t r = suffix_map_get(&map, suffix_ids[suffix_start[row] + d], fresh);
                if (buf_push(&unc[0], row) || buf_push(&unc[1], r)) goto done;
                if (r == fresh && (buf_push(&unc[2], row) || buf_push(&unc[3], d) || buf_push(&unc[4], length[row] - d)))
                    goto done;
            }
        }
    }
    result = PyTuple_New(6);
    if (!result) goto done;
    PyTuple_SET_ITEM(result, 0, words_out);
    words_out = NULL;
    for (int k = 0; k < 5; k++) {
        PyObject *part = buf_bytes(&unc[k]);
        if (!part) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, k + 1, part);
    }
done:
    w->busy = 0;
    Py_XDECREF(words_out);
    free(exits.data);
    for (int k = 0; k < 5; k++) free(unc[k].data);
    free(map.key);
    free(map.value);
    return result;
}

/* resolve(interner, core, start, residual_rows, residual_starts, residual_lengths, token_ids, residual_of, words):
 * walk each residual (a tail of a row of the matrix, int32 arrays) from parser state `start` and
 * set in the uint32 row `words` the bits of the tokens `token_ids[k]` whose residual
 * `residual_of[k]` stays alive to its end (`mask_cache.resolve_residuals`). */
static PyObject *pwalker_resolve(PositionWalker *w, PyObject *args) {
    PyObject *interner, *core;
    int start;
    Py_buffer b[6];
    memset(b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OOiy*y*y*y*y*w*", &interner, &core, &start, &b[0], &b[1], &b[2], &b[3], &b[4], &b[5]))
        return NULL;
    PyObject *result = NULL;
    uint8_t *alive = NULL;
    Interner *x = walk_interner(interner);
    CoreView v;
    Py_ssize_t residuals = b[0].len / (Py_ssize_t)sizeof(int32_t), tokens = b[3].len / (Py_ssize_t)sizeof(int32_t);
    if (!x || need(&b[0], sizeof(int32_t), residuals, "residual_rows") ||
        need(&b[1], sizeof(int32_t), residuals, "residual_starts") ||
        need(&b[2], sizeof(int32_t), residuals, "residual_lengths") || need(&b[3], sizeof(int32_t), tokens, "token_ids") ||
        need(&b[4], sizeof(int32_t), tokens, "residual_of") || need(&b[5], sizeof(uint32_t), w->nwords, "words") ||
        core_view(x, core, &v))
        goto done;
    if (start < 0 || start >= v.states) {
        bad("parser state out of range");
        goto done;
    }
    const int32_t *rows = b[0].buf, *starts = b[1].buf, *lengths = b[2].buf, *ids = b[3].buf, *of = b[4].buf;
    const uint8_t *matrix = w->v[PW_MATRIX].buf;
    if (!(alive = (uint8_t *)malloc((size_t)(residuals ? residuals : 1)))) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t r = 0; r < residuals; r++) {
        if (rows[r] < 0 || rows[r] >= w->rows || starts[r] < 0 || lengths[r] < 1 ||
            (Py_ssize_t)starts[r] + lengths[r] > w->width) {
            index_error("residual out of the matrix");
            goto done;
        }
        const uint8_t *tail = matrix + (Py_ssize_t)rows[r] * w->width + starts[r];
        int32_t state = start;
        for (int32_t k = 0; k < lengths[r] && state >= 0; k++) {
            state = core_step(x, core, &v, state, tail[k]);
            if (state == FAILED) goto done;
        }
        alive[r] = state >= 0;
    }
    uint32_t *words = b[5].buf;
    for (Py_ssize_t k = 0; k < tokens; k++) {
        if (of[k] < 0 || of[k] >= residuals || ids[k] < 0 || ids[k] / 32 >= w->nwords) {
            index_error("uncertain token or residual out of range");
            goto done;
        }
        if (alive[of[k]]) words[ids[k] >> 5] |= (uint32_t)1 << (ids[k] & 31);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    free(alive);
    for (int i = 0; i < 6; i++) PyBuffer_Release(&b[i]);
    return result;
}

static PyMethodDef pwalker_methods[] = {
    {"classify", (PyCFunction)pwalker_classify, METH_VARARGS,
     "classify(interner, core, start, follow, max_uncertain, memo) -> (words, rows, residual_of, residual_rows, "
     "residual_starts, residual_lengths) or (words, None): a position's accepted and uncertain tokens from its "
     "frame-local parser state"},
    {"resolve", (PyCFunction)pwalker_resolve, METH_VARARGS,
     "resolve(interner, core, start, residual_rows, residual_starts, residual_lengths, token_ids, residual_of, "
     "words): set the bits of the uncertain tokens whose residual the parser accepts from state start"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PositionWalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.PositionWalker",
    .tp_basicsize = sizeof(PositionWalker),
    .tp_dealloc = (destructor)pwalker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PositionWalker(byte, depth, lo, hi, token, end, order, lengths, suffix_start, suffix_ids, matrix, "
              "width, words): one vocabulary's trie for classifying byte-level grammar positions in C",
    .tp_methods = pwalker_methods,
    .tp_new = pwalker_new,
};

/* ---------------------------------------------------------------------------------------------
 * The lexer's transitions (`LexerCore._compute`).
 *
 * A `LexerStepper` holds the terminal automata as C arrays and the LexerCore's `keys` list and
 * `_index` dict (which it never rebinds), and computes one transition exactly as the Python method
 * does: the same key tuple, looked up in the same dict; a key not interned yet is handed to
 * `core.intern`, so the Python hook for new states runs as before and ids are assigned in the same
 * order. A lexer state's first visits computed ~47,000 transitions for four Python files, about a
 * sixth of their mask time in Python sets and generator expressions.
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    int32_t *trans, *terminal_of, *rank, *retype_lo, *retype;
    uint8_t *accepting;
    Py_ssize_t states, terminals;
    int32_t newline, poison;
    PyObject *keys, *index, *next_column;
    int32_t *moved, *tracked; /* scratch, `states` each */
    /* the read-only trie arrays `walk` last checked (depth, end, node count) and their depth: a
     * check of all 274,000 nodes was a quarter of a scan of Llama-3's trie */
    PyObject *checked_depth, *checked_end; /* (held, so that no other array takes their place) */
    Py_ssize_t checked_nodes, checked_max_depth;
} LexerStepper;

static void stepper_dealloc(LexerStepper *x) {
    Py_XDECREF(x->checked_depth);
    Py_XDECREF(x->checked_end);
    free(x->trans);
    free(x->terminal_of);
    free(x->rank);
    free(x->retype_lo);
    free(x->retype);
    free(x->accepting);
    free(x->moved);
    free(x->tracked);
    Py_XDECREF(x->keys);
    Py_XDECREF(x->index);
    Py_XDECREF(x->next_column);
    Py_TYPE(x)->tp_free((PyObject *)x);
}

static PyObject *stepper_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"trans", "accepting", "terminal_of", "rank", "retype_lo", "retype", "newline",
                            "poison", "keys", "index", "next_column", NULL};
    Py_buffer v[6];
    memset(v, 0, sizeof(v));
    LexerStepper *x = (LexerStepper *)type->tp_alloc(type, 0);
    if (!x) return NULL;
    int newline, poison;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*y*y*y*y*y*iiO!O!O", names, &v[0], &v[1], &v[2], &v[3], &v[4],
                                     &v[5], &newline, &poison, &PyList_Type, &x->keys, &PyDict_Type, &x->index,
                                     &x->next_column)) {
        x->keys = x->index = x->next_column = NULL;
        Py_DECREF(x);
        return NULL;
    }
    Py_INCREF(x->keys);
    Py_INCREF(x->index);
    Py_INCREF(x->next_column);
    x->newline = newline;
    x->poison = poison;
    x->states = v[1].len;
    x->terminals = v[3].len / (Py_ssize_t)sizeof(int32_t);
    int failed = 1;
    if (v[0].len != x->states * 256 * (Py_ssize_t)sizeof(int32_t)) {
        bad("trans: not [states, 256] int32");
        goto done;
    }
    if (!(x->trans = (int32_t *)copy_array(&v[0], sizeof(int32_t), x->states * 256, "trans")) ||
        !(x->accepting = (uint8_t *)copy_array(&v[1], 1, x->states, "accepting")) ||
        !(x->terminal_of = (int32_t *)copy_array(&v[2], sizeof(int32_t), x->states, "terminal_of")) ||
        !(x->rank = (int32_t *)copy_array(&v[3], sizeof(int32_t), x->terminals, "rank")) ||
        !(x->retype_lo = (int32_t *)copy_array(&v[4], sizeof(int32_t), x->terminals + 1, "retype_lo")))
        goto done;
    Py_ssize_t retypes = v[5].len / (Py_ssize_t)sizeof(int32_t);
    if (!(x->retype = (int32_t *)copy_array(&v[5], sizeof(int32_t), retypes, "retype"))) goto done;
    for (Py_ssize_t s = 0; s < x->states * 256; s++) {
        if (x->trans[s] >= x->states) {
            bad("trans: a state out of range");
            goto done;
        }
    }
    for (Py_ssize_t s = 0; s < x->states; s++) {
        if (x->terminal_of[s] < 0 || x->terminal_of[s] >= x->terminals) {
            bad("terminal_of: a terminal out of range");
            goto done;
        }
    }
    if (x->retype_lo[0] != 0 || x->retype_lo[x->terminals] != retypes) {
        bad("retype_lo: not the bounds of retype");
        goto done;
    }
    for (Py_ssize_t t = 0; t < x->terminals; t++) {
        if (x->retype_lo[t] > x->retype_lo[t + 1]) {
            bad("retype_lo: not increasing");
            goto done;
        }
    }
    /* a key's trackers and the states it drops for retyping: at most all states twice */
    x->moved = (int32_t *)malloc((size_t)(x->states + 1) * sizeof(int32_t));
    x->tracked = (int32_t *)malloc((size_t)(2 * x->states + 1) * sizeof(int32_t));
    if (!x->moved || !x->tracked) {
        PyErr_NoMemory();
        goto done;
    }
    failed = 0;
done:
    for (int i = 0; i < 6; i++) PyBuffer_Release(&v[i]);
    if (failed) {
        Py_DECREF(x);
        return NULL;
    }
    return (PyObject *)x;
}

/* The automaton states in the tuple `items`, each checked against `states`; -1 on error. */
static Py_ssize_t read_states(PyObject *items, Py_ssize_t states, int32_t *out) {
    if (!PyTuple_Check(items)) {
        PyErr_SetString(PyExc_TypeError, "lexer keys hold tuples of automaton states");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    if (n > states) return bad("more automaton states than the automata have");
    for (Py_ssize_t i = 0; i < n; i++) {
        long s = PyLong_AsLong(PyTuple_GET_ITEM(items, i));
        if (s == -1 && PyErr_Occurred()) return -1;
        if (s < 0 || s >= states) return bad("automaton state out of range");
        out[i] = (int32_t)s;
    }
    return n;
}

/* Sort `n` ints and drop repeats (Python builds these as sets, then `tuple(sorted(...))`). */
static Py_ssize_t sort_unique(int32_t *a, Py_ssize_t n) {
    if (n < 2) return n;
    qsort(a, (size_t)n, sizeof(int32_t), cmp_int32);
    Py_ssize_t k = 1;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (a[i] != a[k - 1]) a[k++] = a[i];
    }
    return k;
}

static int in_tuple(PyObject *items, long value) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        long v = PyLong_AsLong(PyTuple_GET_ITEM(items, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v == value) return 1;
    }
    return 0;
}

/* The interned id of `key` (a new key goes through `core.intern`); -3 (FAILED) on error. */
static int32_t intern_key(LexerStepper *x, PyObject *core, PyObject *key) {
    PyObject *found = PyDict_GetItemWithError(x->index, key);
    if (found) {
        Py_ssize_t id = as_id(found);
        return id < 0 ? FAILED : (int32_t)id;
    }
    if (PyErr_Occurred()) return FAILED;
    PyObject *name = PyUnicode_InternFromString("intern");
    PyObject *made = name ? PyObject_CallMethodOneArg(core, name, key) : NULL;
    Py_XDECREF(name);
    if (!made) return FAILED;
    Py_ssize_t id = as_id(made);
    Py_DECREF(made);
    return id < 0 ? FAILED : (int32_t)id;
}

/* `LexerCore._compute(state, byte)`: the next lexer state, DEAD, or `poison`. */
static int32_t stepper_compute(LexerStepper *x, PyObject *core, Py_ssize_t state, int byte) {
    if (state < 0 || state >= PyList_GET_SIZE(x->keys)) return index_error("lexer state out of range"), FAILED;
    if (byte < 0 || byte > 255) return index_error("byte out of range"), FAILED;
    PyObject *key = PyList_GET_ITEM(x->keys, state);
    if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 7) {
        PyErr_SetString(PyExc_TypeError, "lexer keys are 7-tuples");
        return FAILED;
    }
    PyObject *blockers = PyTuple_GET_ITEM(key, 6), *column = PyTuple_GET_ITEM(key, 5);
    if (!PyTuple_Check(blockers)) {
        PyErr_SetString(PyExc_TypeError, "lexer keys hold a tuple of blockers");
        return FAILED;
    }
    long best = PyLong_AsLong(PyTuple_GET_ITEM(key, 2));
    if (best == -1 && PyErr_Occurred()) return FAILED;
    if (best < -1 || best >= x->terminals) return index_error("terminal out of range"), FAILED;
    Py_ssize_t n_alt = read_states(PyTuple_GET_ITEM(key, 0), x->states, x->moved);
    if (n_alt < 0) return FAILED;
    Py_ssize_t n_moved = 0;
    for (Py_ssize_t i = 0; i < n_alt; i++) {
        int32_t t = x->trans[(Py_ssize_t)x->moved[i] * 256 + byte];
        if (t >= 0) x->moved[n_moved++] = t;
    }
    n_moved = sort_unique(x->moved, n_moved);
    int32_t first = -1;
    for (Py_ssize_t i = 0; i < n_moved; i++) {
        int32_t s = x->moved[i];
        if (x->accepting[s] && (first < 0 || x->rank[x->terminal_of[s]] < x->rank[first])) first = x->terminal_of[s];
    }
    int matched = 0;
    if (first >= 0 && (best < 0 || x->rank[first] <= x->rank[best])) {
        best = first;
        matched = 1;
    }
    Py_ssize_t n_trk = read_states(PyTuple_GET_ITEM(key, 1), x->states, x->tracked);
    if (n_trk < 0) return FAILED;
    Py_ssize_t n_tracked = 0;
    for (Py_ssize_t i = 0; i < n_trk; i++) {
        int32_t t = x->trans[(Py_ssize_t)x->tracked[i] * 256 + byte];
        if (t >= 0) x->tracked[n_tracked++] = t;
    }
    if (best >= 0) { /* terminals tried after `best` drop out; those it retypes to stay tracked */
        Py_ssize_t kept = 0;
        for (Py_ssize_t i = 0; i < n_moved; i++) {
            int32_t s = x->moved[i], term = x->terminal_of[s];
            if (x->rank[term] <= x->rank[best]) {
                x->moved[kept++] = s;
                continue;
            }
            for (int32_t k = x->retype_lo[best]; k < x->retype_lo[best + 1]; k++) {
                if (x->retype[k] == term) {
                    x->tracked[n_tracked++] = s;
                    break;
                }
            }
        }
        n_moved = kept;
    }
    n_tracked = sort_unique(x->tracked, n_tracked);
    if (!n_moved) return DEAD;
    if (PyTuple_GET_SIZE(blockers) && !n_tracked) {
        int poisoned = in_tuple(blockers, best);
        for (Py_ssize_t i = 0; poisoned == 1 && i < n_moved; i++) poisoned = in_tuple(blockers, x->terminal_of[x->moved[i]]);
        if (poisoned < 0) return FAILED;
        if (poisoned) return x->poison;
    }
    int newline_alive = 0;
    for (Py_ssize_t i = 0; x->newline >= 0 && i < n_moved && !newline_alive; i++)
        newline_alive = x->terminal_of[x->moved[i]] == x->newline;
    /* the scratch arrays are read before any Python code runs (next_column) */
    PyObject *alternatives = int_tuple(x->moved, n_moved);
    PyObject *trackers = alternatives ? int_tuple(x->tracked, n_tracked) : NULL;
    PyObject *next = !trackers ? NULL
                     : newline_alive ? PyObject_CallFunction(x->next_column, "Oi", column, byte) : Py_NewRef(Py_None);
    PyObject *best_obj = next ? PyLong_FromLong(best) : NULL;
    PyObject *made = best_obj ? PyTuple_Pack(7, alternatives, trackers, best_obj, matched ? Py_True : Py_False,
                                             Py_False, next, blockers) : NULL;
    int32_t result = made ? intern_key(x, core, made) : FAILED;
    Py_XDECREF(made);
    Py_XDECREF(best_obj);
    Py_XDECREF(trackers);
    Py_XDECREF(alternatives);
    Py_XDECREF(next);
    return result;
}

static PyObject *stepper_call(LexerStepper *x, PyObject *args) {
    PyObject *core;
    Py_ssize_t state;
    int byte;
    if (!PyArg_ParseTuple(args, "Oni", &core, &state, &byte)) return NULL;
    int32_t result = stepper_compute(x, core, state, byte);
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

/* The lexer's memo arrays (`table`, `end_class_of`, `poisoned`), read from the core, and read again
 * whenever a transition interned a new state (the core may have grown them into new arrays). */
typedef struct {
    Py_buffer table, end_class_of, poisoned;
    Py_ssize_t states; /* how many states are interned: len(keys) */
} LexViews;

static void views_release(LexViews *v) {
    if (v->table.obj) PyBuffer_Release(&v->table);
    if (v->end_class_of.obj) PyBuffer_Release(&v->end_class_of);
    if (v->poisoned.obj) PyBuffer_Release(&v->poisoned);
    memset(v, 0, sizeof(*v));
}

static int views_get(LexerStepper *x, PyObject *core, LexViews *v) {
    views_release(v);
    v->states = PyList_GET_SIZE(x->keys);
    if (array_view(core, "lexer", "table", sizeof(int32_t), v->states * 256, &v->table) ||
        array_view(core, "lexer", "end_class_of", sizeof(int32_t), v->states, &v->end_class_of) ||
        array_view(core, "lexer", "poisoned", 1, v->states, &v->poisoned)) {
        views_release(v);
        return -1;
    }
    return 0;
}

/* `LexerCore.step`: the memoised transition, computed (and recorded) where the table does not know
 * it yet; FAILED on error. */
static int32_t lex_next(LexerStepper *x, PyObject *core, LexViews *v, int32_t state, uint8_t byte) {
    if (state < 0 || state >= v->states) return bad("lexer state out of range"), FAILED;
    int32_t next = ((const int32_t *)v->table.buf)[(Py_ssize_t)state * 256 + byte];
    if (next == UNKNOWN) {
        next = stepper_compute(x, core, state, byte);
        if (next == FAILED) return FAILED;
        if (PyList_GET_SIZE(x->keys) != v->states && views_get(x, core, v)) return FAILED;
        ((int32_t *)v->table.buf)[(Py_ssize_t)state * 256 + byte] = next;
    }
    if (next >= v->states || next < DEAD) return bad("transition to a lexer state out of range"), FAILED;
    return next;
}

/* ---------------------------------------------------------------------------------------------
 * The lexer's trie walk (`lexer_masks.classify_lexer_state`).
 *
 * One forward scan over the trie's nodes in depth-first preorder (`token_trie.PreorderTrie`), with
 * the lexer state and last match of the current path kept per depth, jumping to a subtree's end
 * where the lexeme dies: memory is read in order (the level layout's depth-first walk took twice
 * as long, ad hoc). A path carries the depth and end class of its last match (`end_class_of[state]
 * >= 0`): where the lexeme dies, every token below that node exits there (longest match ends the
 * lexeme at that depth, or depth -1 / 0 when it never matched / matched before the token). A
 * poisoned state refuses its whole subtree. Transitions not known yet are computed on the way.
 * ------------------------------------------------------------------------------------------- */

enum { LX_ACCEPTED, LX_EXIT_LO, LX_EXIT_HI, LX_EXIT_DEPTH, LX_EXIT_CLASS, LX_BLOCKED_LO, LX_BLOCKED_HI, LX_NUM_OUT };

static int push4(IntBuf *out, int first, int32_t a, int32_t b, int32_t c, int32_t d) {
    return buf_push(&out[first], a) || buf_push(&out[first + 1], b) || buf_push(&out[first + 2], c) ||
           buf_push(&out[first + 3], d);
}

static PyObject *stepper_walk(LexerStepper *x, PyObject *args) {
    PyObject *core;
    Py_buffer v[6];
    int lid, match_depth, match_class;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "Oy*y*y*y*y*y*iii", &core, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &lid,
                          &match_depth, &match_class))
        return NULL;
    PyObject *result = NULL;
    IntBuf out[LX_NUM_OUT];
    memset(out, 0, sizeof(out));
    int32_t *st_state = NULL, *st_depth = NULL, *st_class = NULL;
    LexViews views;
    memset(&views, 0, sizeof(views));
    Py_ssize_t n = v[0].len, max_depth = 0;
    for (int i = 1; i <= 5; i++) {
        if (need(&v[i], sizeof(int32_t), n, "trie array")) goto done;
    }
    const uint8_t *byte = (const uint8_t *)v[0].buf;
    const int32_t *depth = (const int32_t *)v[1].buf, *lo = (const int32_t *)v[2].buf, *hi = (const int32_t *)v[3].buf;
    const int32_t *token = (const int32_t *)v[4].buf, *end = (const int32_t *)v[5].buf;
    /* arrays no one can write (the trie's) are checked once; writable ones at every call */
    int known = v[1].readonly && v[5].readonly && x->checked_depth == v[1].obj && x->checked_end == v[5].obj &&
                x->checked_nodes == n;
    if (known) max_depth = x->checked_max_depth;
    for (Py_ssize_t i = 0; !known && i < n; i++) {
        if (depth[i] < 1 || end[i] <= i || end[i] > n) {
            bad("trie arrays: a depth below 1 or a subtree end out of order");
            goto done;
        }
        if (depth[i] > max_depth) max_depth = depth[i];
    }
    if (!known && v[1].readonly && v[5].readonly && v[1].obj && v[5].obj) {
        Py_INCREF(v[1].obj);
        Py_INCREF(v[5].obj);
        Py_XSETREF(x->checked_depth, v[1].obj);
        Py_XSETREF(x->checked_end, v[5].obj);
        x->checked_nodes = n;
        x->checked_max_depth = max_depth;
    }
    if (views_get(x, core, &views)) goto done;
    if (lid < 0 || lid >= views.states) {
        bad("lexer state out of range");
        goto done;
    }
    st_state = (int32_t *)malloc((size_t)(max_depth + 1) * sizeof(int32_t));
    st_depth = (int32_t *)malloc((size_t)(max_depth + 1) * sizeof(int32_t));
    st_class = (int32_t *)malloc((size_t)(max_depth + 1) * sizeof(int32_t));
    if (!st_state || !st_depth || !st_class) {
        PyErr_NoMemory();
        goto done;
    }
    /* per depth: the lexer state after the prefix so far, and its last match (depth, end class) */
    st_state[0] = lid;
    st_depth[0] = match_depth;
    st_class[0] = match_class;
    Py_ssize_t reached = 0; /* the deepest level whose entry belongs to the current path */
    for (Py_ssize_t i = 0; i < n;) {
        int32_t d = depth[i];
        if (d > reached + 1) {
            bad("trie arrays: a node deeper than its parent's next level");
            goto done;
        }
        int32_t state = st_state[d - 1];
        int32_t next = ((const int32_t *)views.table.buf)[(Py_ssize_t)state * 256 + byte[i]];
        if (next == UNKNOWN || next >= views.states || next < DEAD) {
            next = lex_next(x, core, &views, state, byte[i]);
            if (next == FAILED) goto done;
        }
        if (next < 0) {
            if (push4(out, LX_EXIT_LO, lo[i], hi[i], st_depth[d - 1], st_class[d - 1])) goto done;
            i = end[i];
            reached = d - 1;
            continue;
        }
        if (((const uint8_t *)views.poisoned.buf)[next]) {
            if (buf_push(&out[LX_BLOCKED_LO], lo[i]) || buf_push(&out[LX_BLOCKED_HI], hi[i])) goto done;
            i = end[i];
            reached = d - 1;
            continue;
        }
        if (token[i] >= 0 && buf_push(&out[LX_ACCEPTED], token[i])) goto done;
        int32_t cls = ((const int32_t *)views.end_class_of.buf)[next];
        st_state[d] = next;
        st_depth[d] = cls >= 0 ? d : st_depth[d - 1];
        st_class[d] = cls >= 0 ? cls : st_class[d - 1];
        reached = d;
        i++;
    }
    result = outputs_tuple(out, LX_NUM_OUT);
done:
    free(st_state);
    free(st_depth);
    free(st_class);
    views_release(&views);
    for (int i = 0; i < LX_NUM_OUT; i++) free(out[i].data);
    for (int i = 0; i < 6; i++) PyBuffer_Release(&v[i]);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * Residuals through the lexer (`lexer_masks.ResidualSets.split`).
 *
 * Each residual is a tail `matrix[row, start:start + length]` walked from lexer state `lid` with
 * longest match: it stays alive to its end, or dies, remembering the offset just after its last
 * match and that match's end class (0 and -1: none; a poisoned state leaves it dead with none).
 * ------------------------------------------------------------------------------------------- */

static PyObject *stepper_residuals(LexerStepper *x, PyObject *args) {
    PyObject *core;
    Py_buffer v[5];
    Py_ssize_t width;
    int lid;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "Oy*ny*y*y*iy*", &core, &v[0], &width, &v[1], &v[2], &v[3], &lid, &v[4])) return NULL;
    PyObject *result = NULL, *alive_out = NULL, *end_at_out = NULL, *class_out = NULL, *ended = NULL, *bounds = NULL;
    Py_ssize_t ends = 0; /* residuals whose lexeme ended inside them: `ended` lists them */
    uint64_t *keys = NULL;
    LexViews views;
    memset(&views, 0, sizeof(views));
    Py_ssize_t count = v[1].len / (Py_ssize_t)sizeof(int32_t);
    if (need(&v[2], sizeof(int32_t), count, "starts") || need(&v[3], sizeof(int32_t), count, "lengths")) goto done;
    if (width <= 0 || v[0].len % width) {
        bad("matrix: not a whole number of rows of the given width");
        goto done;
    }
    if (views_get(x, core, &views)) goto done;
    if (lid < 0 || lid >= views.states) {
        bad("lexer state out of range");
        goto done;
    }
    alive_out = PyBytes_FromStringAndSize(NULL, count);
    end_at_out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    class_out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    if (!alive_out || !end_at_out || !class_out) goto done;
    uint8_t *alive = (uint8_t *)PyBytes_AS_STRING(alive_out);
    int32_t *end_at = (int32_t *)PyBytes_AS_STRING(end_at_out), *end_class = (int32_t *)PyBytes_AS_STRING(class_out);
    const uint8_t *matrix = (const uint8_t *)v[0].buf;
    Py_ssize_t matrix_rows = v[0].len / width;
    const int32_t *rows = (const int32_t *)v[1].buf, *starts = (const int32_t *)v[2].buf;
    const int32_t *lengths = (const int32_t *)v[3].buf;
    const uint8_t *loops = (const uint8_t *)v[4].buf; /* per end class: its lexeme starts the next one from lid */
    Py_ssize_t num_loops = v[4].len;
    for (Py_ssize_t i = 0; i < count; i++) {
        int32_t row = rows[i], start = starts[i], length = lengths[i];
        if (row < 0 || row >= matrix_rows || start < 0 || length < 0 || (Py_ssize_t)start + length > width) {
            bad("residual out of the matrix");
            goto done;
        }
        const uint8_t *bytes = matrix + (Py_ssize_t)row * width + start;
        int32_t state = lid, lexeme_start = 0;
        alive[i] = 1;
        end_at[i] = 0;
        end_class[i] = -1;
        for (int32_t col = 0; col < length; col++) {
            /* the memo table read inline; lex_next (which may grow and move the arrays) only for
             * a transition not known yet: most of a split's time is this loop */
            int32_t next = ((const int32_t *)views.table.buf)[(Py_ssize_t)state * 256 + bytes[col]];
            if (next == UNKNOWN || next >= views.states || next < DEAD) {
                next = lex_next(x, core, &views, state, bytes[col]);
                if (next == FAILED) goto done;
            }
            if (next < 0 || ((const uint8_t *)views.poisoned.buf)[next]) {
                int32_t last = end_class[i];
                if (next < 0 && end_at[i] > lexeme_start && last < num_loops && loops[last]) {
                    /* the lexeme ended as a looping class: the next one starts there, from lid */
                    lexeme_start = end_at[i];
                    col = lexeme_start - 1;
                    state = lid;
                    continue;
                }
                /* a refused reserved word has no shorter match to fall back on, nor has a lexeme
                 * that did not match since the last loop */
                if (next >= 0 || end_at[i] <= lexeme_start) end_at[i] = 0;
                alive[i] = 0;
                ends += end_at[i] > 0;
                break;
            }
            state = next;
            int32_t cls = ((const int32_t *)views.end_class_of.buf)[next];
            if (cls >= 0) {
                end_at[i] = col + 1;
                end_class[i] = cls;
            }
        }
    }
    /* the residuals whose lexeme ended inside them, by end class (then in order) */
    keys = (uint64_t *)malloc((size_t)(ends ? ends : 1) * sizeof(uint64_t));
    if (!keys) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t k = 0, groups = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!alive[i] && end_at[i] > 0) keys[k++] = (uint64_t)(uint32_t)end_class[i] << 32 | (uint64_t)i;
    }
    qsort(keys, (size_t)ends, sizeof(uint64_t), cmp_uint64);
    for (Py_ssize_t j = 0; j < ends; j++) groups += !j || keys[j] >> 32 != keys[j - 1] >> 32;
    ended = PyBytes_FromStringAndSize(NULL, ends * (Py_ssize_t)sizeof(int32_t));
    bounds = PyBytes_FromStringAndSize(NULL, 2 * groups * (Py_ssize_t)sizeof(int32_t));
    if (!ended || !bounds) goto done;
    int32_t *members = (int32_t *)PyBytes_AS_STRING(ended), *bound = (int32_t *)PyBytes_AS_STRING(bounds);
    for (Py_ssize_t j = 0; j < ends; j++) {
        members[j] = (int32_t)(keys[j] & 0xFFFFFFFFu);
        if (!j || keys[j] >> 32 != keys[j - 1] >> 32) {
            *bound++ = (int32_t)(keys[j] >> 32);
            *bound++ = (int32_t)j;
        }
    }
    result = PyTuple_Pack(5, alive_out, end_at_out, class_out, ended, bounds);
done:
    free(keys);
    Py_XDECREF(alive_out);
    Py_XDECREF(end_at_out);
    Py_XDECREF(class_out);
    Py_XDECREF(ended);
    Py_XDECREF(bounds);
    views_release(&views);
    for (int i = 0; i < 5; i++) PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef stepper_methods[] = {
    {"compute", (PyCFunction)stepper_call, METH_VARARGS,
     "compute(core, state, byte) -> state: LexerCore._compute, interning new keys through core.intern"},
    {"walk", (PyCFunction)stepper_walk, METH_VARARGS,
     "walk(core, byte, depth, lo, hi, token, end, lid, match_depth, match_class) over a trie in preorder -> "
     "(accepted, exit_lo, exit_hi, exit_depth, exit_class, blocked_lo, blocked_hi), each the bytes of an int32 array"},
    {"residuals", (PyCFunction)stepper_residuals, METH_VARARGS,
     "residuals(core, matrix, width, rows, starts, lengths, lid, loops) -> (alive, end_at, end_class): the bytes "
     "of a uint8 and two int32 arrays; a lexeme ending as an end class that loops (uint8 per class) restarts "
     "from lid"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LexerStepperType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.LexerStepper",
    .tp_basicsize = sizeof(LexerStepper),
    .tp_dealloc = (destructor)stepper_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LexerStepper(trans, accepting, terminal_of, rank, retype_lo, retype, newline, poison, keys, index, "
              "next_column): a LexerCore's transitions in C",
    .tp_methods = stepper_methods,
    .tp_new = stepper_new,
};

/* ---------------------------------------------------------------------------------------------
 * The lexer layer's parser side (`LexParserCore.after` and `LexParserCore.fresh`).
 *
 * A new parser context asks both about a hundred times (the residual recursion: `after` at every
 * lexeme a residual ends, `fresh` at every state that leads to), nearly all new. In Python each was
 * a chain of calls, dict lookups and tuple unpacking around the parser's C step: about 7 µs an
 * `after` and 5 µs a `fresh`, a third of the time of a slow warm Python mask. A `SymbolSteps` does
 * the common cases here and hands the rest to the Python ones (`after`, `fresh`):
 *
 * - `after`: an ignored lexeme leaves the state as it was; any other terminal is a parser step
 *   (`ParserCore.step`, memoised in the core's table, computed under its lock when new). Under
 *   Python's indentation tracker (`IndentingParser`, whose `keys` and `_index` it appends to, as
 *   `intern` does, under its lock) with the brackets' depth and the `def` marks, as `_step` does;
 *   newlines, line joins and states in a completion scope go to Python.
 * - `fresh`: the lexer state that starts a lexeme depends on the parser state only through the
 *   terminals it allows (`ParserCore.allowed_set`: the first symbols of its stacks' tops, and under
 *   the tracker without INDENT and DEDENT, with the newline inside brackets), so it is looked up by
 *   that bit set, and asked of Python the first time a set is met.
 * ------------------------------------------------------------------------------------------- */

/* An int returned by a callable (a parser or lexer state), or FAILED. */
static int32_t state_result(PyObject *result) {
    if (!result) return FAILED;
    long value = PyLong_AsLong(result);
    Py_DECREF(result);
    if (value == -1 && PyErr_Occurred()) return FAILED;
    if (value < DEAD || value > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "state out of range");
        return FAILED;
    }
    return (int32_t)value;
}

#define K_IGNORED 1
#define K_NEWLINE 2
#define K_OPENING 4
#define K_CLOSING 8
#define K_DEF 16
#define K_JOIN 32
#define AFTER_JOIN ((long long)1 << 61) /* indentation.py's _AFTER_JOIN and _PENDING_DEF */
#define PENDING_DEF ((long long)1 << 62)

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

static int ss_traverse(SymbolSteps *s, visitproc visit, void *arg) {
    Py_VISIT(s->parser);
    Py_VISIT(s->x);
    Py_VISIT(s->parser_acquire);
    Py_VISIT(s->parser_release);
    Py_VISIT(s->end_classes);
    Py_VISIT(s->keys);
    Py_VISIT(s->index);
    Py_VISIT(s->key_acquire);
    Py_VISIT(s->key_release);
    Py_VISIT(s->after);
    Py_VISIT(s->fresh);
    return 0;
}

static int ss_clear(SymbolSteps *s) {
    Py_CLEAR(s->parser);
    Py_CLEAR(s->x);
    Py_CLEAR(s->parser_acquire);
    Py_CLEAR(s->parser_release);
    Py_CLEAR(s->end_classes);
    Py_CLEAR(s->keys);
    Py_CLEAR(s->index);
    Py_CLEAR(s->key_acquire);
    Py_CLEAR(s->key_release);
    Py_CLEAR(s->after);
    Py_CLEAR(s->fresh);
    return 0;
}

static void ss_dealloc(SymbolSteps *s) {
    PyObject_GC_UnTrack(s);
    ss_clear(s);
    free(s->kind);
    free(s->allowed);
    free(s->by_hash.keys);
    free(s->by_hash.values);
    free(s->sets);
    free(s->scratch);
    free(s->lids);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *ss_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"parser", "allowed", "kinds", "end_classes", "keys", "index", "key_lock", "indent",
                            "dedent", "newline", "after", "fresh", NULL};
    SymbolSteps *s = (SymbolSteps *)type->tp_alloc(type, 0);
    if (!s) return NULL;
    PyObject *parser, *end_classes, *keys, *index, *key_lock, *after, *fresh;
    Py_buffer allowed, kinds;
    int indent, dedent, newline;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Oy*y*O!OOOiiiOO", names, &parser, &allowed, &kinds, &PyList_Type,
                                     &end_classes, &keys, &index, &key_lock, &indent, &dedent, &newline, &after,
                                     &fresh)) {
        Py_DECREF(s);
        return NULL;
    }
    int failed = 1;
    PyObject *x = PyObject_GetAttrString(parser, "_native");
    if (!x) goto done;
    if (!PyObject_TypeCheck(x, &InternerType)) {
        Py_DECREF(x);
        PyErr_SetString(PyExc_TypeError, "the parser core has no C interner");
        goto done;
    }
    s->x = (Interner *)x;
    PyObject *lock = PyObject_GetAttrString(parser, "lock");
    if (!lock) goto done;
    s->parser_acquire = PyObject_GetAttrString(lock, "acquire");
    s->parser_release = s->parser_acquire ? PyObject_GetAttrString(lock, "release") : NULL;
    Py_DECREF(lock);
    if (!s->parser_release) goto done;
    Py_INCREF(parser);
    s->parser = parser;
    Py_INCREF(end_classes);
    s->end_classes = end_classes;
    Py_INCREF(after);
    s->after = after;
    Py_INCREF(fresh);
    s->fresh = fresh;
    if (keys != Py_None) {
        if (!PyList_Check(keys) || !PyDict_Check(index)) {
            PyErr_SetString(PyExc_TypeError, "keys must be a list and index a dict");
            goto done;
        }
        Py_INCREF(keys);
        s->keys = keys;
        Py_INCREF(index);
        s->index = index;
        if (!(s->key_acquire = PyObject_GetAttrString(key_lock, "acquire")) ||
            !(s->key_release = PyObject_GetAttrString(key_lock, "release")))
            goto done;
    }
    s->indent = indent;
    s->dedent = dedent;
    s->newline = newline;
    s->words = s->x->first_words;
    s->rtn_states = s->x->states;
    s->terminals = kinds.len;
    if (s->terminals > s->x->alphabet) {
        bad("kinds: more terminals than the parser's alphabet");
        goto done;
    }
    if ((indent >= s->x->alphabet || dedent >= s->x->alphabet || newline >= s->x->alphabet)) {
        bad("indent, dedent or newline out of the parser's alphabet");
        goto done;
    }
    if (!(s->kind = (uint8_t *)copy_array(&kinds, 1, s->terminals, "kinds")) ||
        !(s->allowed = (uint64_t *)copy_array(&allowed, sizeof(uint64_t), s->rtn_states * s->words, "allowed")) ||
        !(s->scratch = (uint64_t *)calloc((size_t)s->words + 1, sizeof(uint64_t))) ||
        u64_init(&s->by_hash, 8))
        goto done;
    failed = 0;
done:
    PyBuffer_Release(&allowed);
    PyBuffer_Release(&kinds);
    if (failed) {
        Py_DECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

/* Call a lock's bound `acquire` or `release`; -1 with an exception set if that fails. */
static int lock_call(PyObject *method) {
    PyObject *done = PyObject_CallNoArgs(method);
    Py_XDECREF(done);
    return done ? 0 : -1;
}

/* Release a lock (its bound `release`) after a section that gave `result` (FAILED: an exception is set, and kept). */
static int32_t unlock_after(PyObject *release, int32_t result) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    int failed = lock_call(release);
    if (type) {
        if (failed) PyErr_Clear();
        PyErr_Restore(type, value, traceback);
        return FAILED;
    }
    return failed ? FAILED : result;
}

/* A monotonic clock in nanoseconds for `stats()` (0 where POSIX's is missing: the stats then
 * count steps but no time). */
static long long monotonic_ns(void) {
#if defined(CLOCK_MONOTONIC)
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
#else
    return 0;
#endif
}

/* The parser's memo table entry [state, symbol], read (`write` NULL) or written. */
static int ss_table(SymbolSteps *s, int32_t state, int32_t symbol, int32_t *read, const int32_t *write) {
    Py_ssize_t at = (Py_ssize_t)state * s->x->alphabet + symbol;
    if (held_view(&s->x->held_table, s->parser, "core", "table", sizeof(int32_t), at + 1)) return -1;
    if (write) {
        ((int32_t *)s->x->held_table.view.buf)[at] = *write;
    } else {
        *read = ((const int32_t *)s->x->held_table.view.buf)[at];
    }
    return 0;
}

/* `ParserCore.step`: the memoised transition, computed under the core's lock the first time. */
static int32_t ss_parser_step(SymbolSteps *s, int32_t state, int32_t symbol) {
    if (state < 0 || state >= PyList_GET_SIZE(s->x->state_stacks)) return index_error("parser state out of range"), FAILED;
    if (symbol < 0 || symbol >= s->x->alphabet) return index_error("symbol out of range"), FAILED;
    int32_t found;
    if (ss_table(s, state, symbol, &found, NULL)) return FAILED;
    if (found != UNKNOWN) return found;
    if (lock_call(s->parser_acquire)) return FAILED;
    int32_t result = FAILED;
    if (!ss_table(s, state, symbol, &found, NULL)) {
        long long start = monotonic_ns();
        result = found != UNKNOWN ? found : step_state(s->x, s->parser, state, symbol);
        s->computed += found == UNKNOWN;
        s->computed_ns += monotonic_ns() - start;
        if (result != FAILED && found == UNKNOWN && ss_table(s, state, symbol, NULL, &result)) result = FAILED;
    }
    return unlock_after(s->parser_release, result);
}

/* `IndentingParser.intern` of (inner, depth, levels, False, defs, None). */
static int32_t ss_intern(SymbolSteps *s, int32_t inner, long depth, PyObject *levels, long long defs) {
    PyObject *key = Py_BuildValue("(ilOOLO)", inner, depth, levels, Py_False, defs, Py_None);
    if (!key) return FAILED;
    int32_t result = FAILED;
    PyObject *found = PyDict_GetItemWithError(s->index, key);
    if (found || PyErr_Occurred()) {
        Py_ssize_t id = found ? as_id(found) : -1;
        result = id < 0 ? FAILED : (int32_t)id;
        Py_DECREF(key);
        return result;
    }
    if (lock_call(s->key_acquire)) {
        Py_DECREF(key);
        return FAILED;
    }
    found = PyDict_GetItemWithError(s->index, key); /* another thread may have interned it meanwhile */
    if (found) {
        Py_ssize_t id = as_id(found);
        result = id < 0 ? FAILED : (int32_t)id;
    } else if (!PyErr_Occurred()) {
        Py_ssize_t id = PyList_GET_SIZE(s->keys);
        PyObject *ident = id <= INT32_MAX ? PyLong_FromSsize_t(id) : NULL;
        if (!ident && !PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "too many parser states");
        if (ident && !PyDict_SetItem(s->index, key, ident) && !PyList_Append(s->keys, key)) result = (int32_t)id;
        Py_XDECREF(ident);
    }
    Py_DECREF(key);
    return unlock_after(s->key_release, result);
}

/* A long item of a tuple, or -1 with an exception set (the callers' items are never negative). */
static long long tuple_long(PyObject *tuple, Py_ssize_t i) {
    long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
    if (value < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative item in a state key");
    return value;
}

/* The indentation state `pid`'s key, or NULL with an exception set. */
static PyObject *ss_key(SymbolSteps *s, int32_t pid) {
    if (pid < 0 || pid >= PyList_GET_SIZE(s->keys)) return index_error("parser state out of range"), NULL;
    PyObject *key = PyList_GET_ITEM(s->keys, pid);
    if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 6) {
        PyErr_SetString(PyExc_TypeError, "an indentation state's key must be a 6-tuple");
        return NULL;
    }
    return key;
}

static int32_t ss_call_after(SymbolSteps *s, int32_t pid, int32_t end_class) {
    return state_result(PyObject_CallFunction(s->after, "ii", pid, end_class));
}

/* `LexParserCore.after`: the parser state after a lexeme ended as `end_class` at `pid`. */
static int32_t ss_after(SymbolSteps *s, int32_t pid, int32_t end_class) {
    if (!s->parser) return bad("SymbolSteps cleared"), FAILED;
    if (end_class < 0) return index_error("end class out of range"), FAILED;
    if (end_class >= PyList_GET_SIZE(s->end_classes)) return ss_call_after(s, pid, end_class);
    PyObject *end = PyList_GET_ITEM(s->end_classes, end_class);
    if (!PyTuple_Check(end) || PyTuple_GET_SIZE(end) < 1) return ss_call_after(s, pid, end_class);
    long long terminal = tuple_long(end, 0);
    if (terminal < 0) return FAILED;
    if (terminal >= s->terminals) return ss_call_after(s, pid, end_class);
    uint8_t kind = s->kind[terminal];
    if (!s->keys) {
        if (kind & K_IGNORED) return pid;
        return ss_parser_step(s, pid, (int32_t)terminal);
    }
    PyObject *key = ss_key(s, pid);
    if (!key) return FAILED;
    int overflow;
    long long defs = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(key, 4), &overflow);
    if (defs == -1 && PyErr_Occurred()) return FAILED;
    if (overflow || defs < 0) return ss_call_after(s, pid, end_class); /* (levels past 61 bits: Python's ints) */
    if (kind & K_IGNORED) {
        if ((kind & K_JOIN) || (defs & AFTER_JOIN)) return ss_call_after(s, pid, end_class);
        return pid;
    }
    if ((kind & K_NEWLINE) || PyTuple_GET_ITEM(key, 5) != Py_None) return ss_call_after(s, pid, end_class);
    long long inner = tuple_long(key, 0), depth = tuple_long(key, 1);
    if (inner < 0 || depth < 0) return FAILED;
    defs &= ~AFTER_JOIN;
    if (kind & K_OPENING) {
        depth++;
    } else if (kind & K_CLOSING) {
        if (!depth) return DEAD;
        depth--;
    }
    if (inner > INT32_MAX) return index_error("parser state out of range"), FAILED;
    PyObject *levels = PyTuple_GET_ITEM(key, 2);
    Py_INCREF(levels); /* (the step may run Python code: `key` is only borrowed from the keys list) */
    int32_t nxt = ss_parser_step(s, (int32_t)inner, (int32_t)terminal);
    if (kind & K_DEF) defs |= PENDING_DEF;
    if (nxt >= 0) nxt = ss_intern(s, nxt, (long)depth, levels, defs); /* (else DEAD or FAILED) */
    Py_DECREF(levels);
    return nxt;
}

/* A bit set's hash (63 bits: the map keeps key + 1). */
static uint64_t bits_hash(const uint64_t *w, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= w[i];
        h *= 0xFF51AFD7ED558CCDull;
        h ^= h >> 33;
    }
    return h >> 1;
}

/* The terminals the parser allows at `inner` (`ParserCore.allowed_set`), under the indentation
 * tracker without INDENT and DEDENT and with the newline inside brackets (`depth`), into the scratch. */
static int ss_allowed(SymbolSteps *s, long long inner, long long depth) {
    Interner *x = s->x;
    if (inner < 0 || inner >= PyList_GET_SIZE(x->state_stacks)) return index_error("parser state out of range");
    PyObject *stacks = PyList_GET_ITEM(x->state_stacks, inner);
    if (!PyTuple_Check(stacks)) return bad("state stacks must be tuples");
    uint64_t *bits = s->scratch;
    memset(bits, 0, (size_t)s->words * sizeof(uint64_t));
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stacks); i++) {
        int32_t node_id, q;
        Py_ssize_t n;
        if (node_arg(x, PyTuple_GET_ITEM(stacks, i), &node_id) || node_at(x, node_id, &q, &n)) return -1;
        const uint64_t *row = s->allowed + (Py_ssize_t)q * s->words;
        for (Py_ssize_t w = 0; w < s->words; w++) bits[w] |= row[w];
    }
    if (s->keys) {
        if (s->indent >= 0) bits[s->indent / 64] &= ~((uint64_t)1 << (s->indent % 64));
        if (s->dedent >= 0) bits[s->dedent / 64] &= ~((uint64_t)1 << (s->dedent % 64));
        if (depth && s->newline >= 0) bits[s->newline / 64] |= (uint64_t)1 << (s->newline % 64);
    }
    return 0;
}

/* `LexParserCore.fresh(pid)[1]`: the lexer state that starts a lexeme at parser state `pid`. */
static int32_t ss_fresh(SymbolSteps *s, int32_t pid) {
    if (!s->parser) return bad("SymbolSteps cleared"), FAILED;
    long long inner = pid, depth = 0;
    if (s->keys) {
        PyObject *key = ss_key(s, pid);
        if (!key) return FAILED;
        if (PyTuple_GET_ITEM(key, 3) != Py_False || PyTuple_GET_ITEM(key, 5) != Py_None)
            return state_result(PyObject_CallFunction(s->fresh, "i", pid));
        inner = tuple_long(key, 0);
        depth = tuple_long(key, 1);
        if (inner < 0 || depth < 0) return FAILED;
    }
    if (ss_allowed(s, inner, depth)) return FAILED;
    int32_t at = u64_get(&s->by_hash, bits_hash(s->scratch, s->words));
    if (at >= 0 && !memcmp(s->sets + at * s->words, s->scratch, (size_t)s->words * sizeof(uint64_t)))
        return s->lids[at];
    int32_t lid = state_result(PyObject_CallFunction(s->fresh, "i", pid));
    if (lid < 0 || at >= 0) return lid; /* (at >= 0: another set with the same hash, not kept) */
    /* the call may have run another thread's steps through this object: the scratch is filled again */
    if (ss_allowed(s, inner, depth)) return FAILED;
    uint64_t h = bits_hash(s->scratch, s->words);
    if (u64_get(&s->by_hash, h) != UNKNOWN) return lid;
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 64;
        uint64_t *sets = (uint64_t *)realloc(s->sets, (size_t)(cap * s->words) * sizeof(uint64_t));
        if (sets) s->sets = sets;
        int32_t *lids = sets ? (int32_t *)realloc(s->lids, (size_t)cap * sizeof(int32_t)) : NULL;
        if (lids) s->lids = lids;
        if (!sets || !lids) return PyErr_NoMemory(), FAILED;
        s->cap = cap;
    }
    memcpy(s->sets + s->count * s->words, s->scratch, (size_t)s->words * sizeof(uint64_t));
    s->lids[s->count] = lid;
    if (u64_put(&s->by_hash, h, (int32_t)s->count)) return FAILED;
    s->count++;
    return lid;
}

static PyObject *ss_after_call(SymbolSteps *s, PyObject *args) {
    int pid, end_class;
    if (!PyArg_ParseTuple(args, "ii", &pid, &end_class)) return NULL;
    int32_t result = ss_after(s, pid, end_class);
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

static PyObject *ss_fresh_call(SymbolSteps *s, PyObject *args) {
    int pid;
    if (!PyArg_ParseTuple(args, "i", &pid)) return NULL;
    int32_t result = ss_fresh(s, pid);
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

static PyObject *ss_stats(SymbolSteps *s, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue("(LL)", s->computed, s->computed_ns);
}

static PyMethodDef ss_methods[] = {
    {"stats", (PyCFunction)ss_stats, METH_NOARGS,
     "stats() -> (steps, ns): the parser steps computed here and the time they took (`benchmarks/mask_profile.py`)"},
    {"after", (PyCFunction)ss_after_call, METH_VARARGS,
     "after(pid, end_class) -> pid: LexParserCore.after"},
    {"fresh", (PyCFunction)ss_fresh_call, METH_VARARGS,
     "fresh(pid) -> lexer state: LexParserCore.fresh(pid)[1]"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SymbolStepsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.SymbolSteps",
    .tp_basicsize = sizeof(SymbolSteps),
    .tp_dealloc = (destructor)ss_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_traverse = (traverseproc)ss_traverse,
    .tp_clear = (inquiry)ss_clear,
    .tp_doc = "SymbolSteps(parser, allowed, kinds, end_classes, keys, index, key_lock, indent, dedent, newline, after, "
              "fresh): LexParserCore.after and fresh in C for the common cases",
    .tp_methods = ss_methods,
    .tp_new = ss_new,
};

/* ---------------------------------------------------------------------------------------------
 * Which residuals of a set a parser state accepts (`LexerMaskComputer._residuals_accepted`).
 *
 * A `ResidualWalker` runs the recursion over residual sets and parser states in C: the split of a
 * set at a fresh lexer state (`ResidualSets.split`, a Python callable), the parser state after
 * each lexeme that ends in it (`LexParserCore.after`) and a state's fresh lexer state
 * (`LexParserCore.fresh`) from a `SymbolSteps`, each memoised here (after and fresh are functions
 * of their arguments for the life of the core; first splits per set and lexer state, splits with
 * loops per the split they came from), and the results per (parser state, set) are kept in two
 * generations of hash maps (the young one handed over to the old when it holds `limit` entries),
 * as numbers of distinct results, hash-consed (below). `split` must return one object per (set,
 * lexer state, loops), as `ResidualSets.split` memoises them: the walker keeps what it read of each
 * split by its address.
 * A new Python context makes about two hundred such calls, nearly all new; in Python each cost its
 * frame, a few dict lookups, a list and numpy's fancy indexing.
 * ------------------------------------------------------------------------------------------- */

/* What the recursion reads of a `ResidualSplit`, taken from its attributes once (they never change):
 * per child its end class, its tails (a `Residuals`) and their index, and its (member, tail) pairs. */
typedef struct SplitInfo SplitInfo;
struct SplitInfo {
    PyObject *split, *keep;      /* the split, and (children, flags, pairs) as tuples, held */
    PyObject *loops;             /* the end classes it followed in place (a frozenset; NULL: none) */
    const char *flags;           /* `accepted` as 0/1 bytes */
    Py_ssize_t members, count;   /* residuals in the set; children */
    int32_t position;            /* in the walker's `infos` */
    int32_t *end_class, *tail_index;
    PyObject **tails;            /* borrowed from the children in `keep` */
    const int64_t **pairs;
    Py_ssize_t *npairs;
    /* the splits with more loops it led to (`rw_split_again`), by the children that came back to
     * the parser state (a bit per child, for splits of at most 64 children) */
    struct LoopStep { uint64_t mask; SplitInfo *next; } *next;
    Py_ssize_t nnext, next_cap;
};

typedef struct {
    PyObject_HEAD
    SymbolSteps *steps;              /* fresh(pid) -> lexer state; after(pid, end class) -> pid */
    PyObject *split;                 /* split(set, lid, loops) */
    PyObject *no_loops;              /* frozenset() */
    PyObject *s_index, *s_children, *s_flags, *s_pairs;
    Py_ssize_t limit;
    /* results: (pid << 32 | set index) -> result, in two generations (the young one handed over to
     * the old when it holds `limit` entries) */
    U64Map young, old;
    /* The results themselves, hash-consed: a result is its flags (bytes, one object per content:
     * `results` by number, `contents` the number of each), and a merged one is remembered by its
     * split and its children's results (`combos`: a hash of them -> where the combo sits in
     * `combo_keys`, as [split position, result, child results...]). Parser contexts differ, but
     * their results hardly do: of ~79,000 new (parser state, set) pairs of 16 held-out Python
     * files, 97% had a split and children's results met before (ad hoc count), and each had
     * copied its split's flags and merged its children's again (57,000 members for the largest). */
    PyObject *results, *contents;
    Py_ssize_t result_bytes;
    U64Map combos;
    int32_t *combo_keys;
    Py_ssize_t combo_size, combo_cap;
    int walking; /* calls of `result` in progress (a split may run other threads' Python code) */
    U64Map afters, lids, splits; /* (pid, end class) -> pid; pid -> lid; (set, lid) -> its first split in `infos` */
    U64Map info_of;              /* a split's address -> its SplitInfo in `infos` (which holds the split) */
    SplitInfo **infos;
    Py_ssize_t ninfos, infos_cap;
} ResidualWalker;

static void info_free(SplitInfo *info) {
    if (!info) return;
    Py_XDECREF(info->split);
    Py_XDECREF(info->keep);
    Py_XDECREF(info->loops);
    free(info->next);
    free(info->end_class);
    free(info->tail_index);
    free(info->tails);
    free(info->pairs);
    free(info->npairs);
    free(info);
}

static void rw_dealloc(ResidualWalker *w) {
    Py_XDECREF(w->steps);
    Py_XDECREF(w->split);
    Py_XDECREF(w->no_loops);
    Py_XDECREF(w->s_index);
    Py_XDECREF(w->s_children);
    Py_XDECREF(w->s_flags);
    Py_XDECREF(w->s_pairs);
    Py_XDECREF(w->results);
    Py_XDECREF(w->contents);
    free(w->combo_keys);
    U64Map *maps[] = {&w->young, &w->old, &w->afters, &w->lids, &w->splits, &w->info_of, &w->combos};
    for (size_t i = 0; i < sizeof(maps) / sizeof(maps[0]); i++) {
        free(maps[i]->keys);
        free(maps[i]->values);
    }
    for (Py_ssize_t i = 0; i < w->ninfos; i++) info_free(w->infos[i]);
    free(w->infos);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyObject *rw_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"steps", "split", "limit", NULL};
    ResidualWalker *w = (ResidualWalker *)type->tp_alloc(type, 0);
    if (!w) return NULL;
    PyObject *steps, *split;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!On", names, &SymbolStepsType, &steps, &split, &w->limit)) {
        Py_DECREF(w);
        return NULL;
    }
    Py_INCREF(steps);
    Py_INCREF(split);
    w->steps = (SymbolSteps *)steps;
    w->split = split;
    if (!(w->no_loops = PyFrozenSet_New(NULL)) || !(w->s_index = PyUnicode_InternFromString("index")) ||
        !(w->s_children = PyUnicode_InternFromString("children")) ||
        !(w->s_flags = PyUnicode_InternFromString("flags")) || !(w->s_pairs = PyUnicode_InternFromString("pairs")) ||
        !(w->results = PyList_New(0)) || !(w->contents = PyDict_New()) ||
        u64_init(&w->young, 12) || u64_init(&w->old, 4) || u64_init(&w->afters, 12) || u64_init(&w->lids, 12) ||
        u64_init(&w->splits, 12) || u64_init(&w->info_of, 10) || u64_init(&w->combos, 12)) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

static int32_t rw_after(ResidualWalker *w, int32_t pid, int32_t end_class) {
    uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)end_class;
    int32_t found = u64_get(&w->afters, key);
    if (found != UNKNOWN) return found;
    found = ss_after(w->steps, pid, end_class);
    if (found == FAILED || u64_put(&w->afters, key, found)) return FAILED;
    return found;
}

static int32_t rw_fresh(ResidualWalker *w, int32_t pid) {
    int32_t found = u64_get(&w->lids, (uint64_t)(uint32_t)pid);
    if (found != UNKNOWN) return found;
    found = ss_fresh(w->steps, pid);
    if (found == FAILED || u64_put(&w->lids, (uint64_t)(uint32_t)pid, found)) return FAILED;
    return found;
}

/* A Python int attribute of `obj` (a set's index, a child's end class) as int32, or FAILED. */
static int32_t int_attr(PyObject *obj, PyObject *name) {
    return state_result(PyObject_GetAttr(obj, name));
}

/* Fill `info` from `split`'s children, flags and pairs (checked); -1 with an exception set. */
static int info_fill(ResidualWalker *w, SplitInfo *info, PyObject *split) {
    /* (children and pairs as tuples: the items the info points into are then its own) */
    PyObject *listed = PyObject_GetAttr(split, w->s_children);
    PyObject *children = listed && PyList_Check(listed) ? PySequence_Tuple(listed) : NULL;
    Py_XDECREF(listed);
    PyObject *flags = children ? PyObject_GetAttr(split, w->s_flags) : NULL;
    listed = flags ? PyObject_GetAttr(split, w->s_pairs) : NULL;
    PyObject *pairs = listed && PyList_Check(listed) ? PySequence_Tuple(listed) : NULL;
    Py_XDECREF(listed);
    if (pairs) info->keep = PyTuple_Pack(3, children, flags, pairs);
    Py_XDECREF(children);
    Py_XDECREF(flags);
    Py_XDECREF(pairs);
    if (!info->keep) {
        if (!PyErr_Occurred()) bad("a split's children and pairs must be lists");
        return -1;
    }
    if (!PyBytes_Check(flags) || PyTuple_GET_SIZE(children) != PyTuple_GET_SIZE(pairs))
        return bad("a split's flags must be bytes, and its pairs one per child");
    info->flags = PyBytes_AS_STRING(flags);
    info->members = PyBytes_GET_SIZE(flags);
    Py_ssize_t n = info->count = PyTuple_GET_SIZE(children), size = n ? n : 1;
    info->end_class = (int32_t *)malloc((size_t)size * sizeof(int32_t));
    info->tail_index = (int32_t *)malloc((size_t)size * sizeof(int32_t));
    info->tails = (PyObject **)malloc((size_t)size * sizeof(PyObject *));
    info->pairs = (const int64_t **)malloc((size_t)size * sizeof(int64_t *));
    info->npairs = (Py_ssize_t *)malloc((size_t)size * sizeof(Py_ssize_t));
    if (!info->end_class || !info->tail_index || !info->tails || !info->pairs || !info->npairs)
        return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *child = PyTuple_GET_ITEM(children, i), *bytes = PyTuple_GET_ITEM(pairs, i);
        if (!PyTuple_Check(child) || PyTuple_GET_SIZE(child) != 4) return bad("a child must be a 4-tuple");
        if (!PyBytes_Check(bytes) || PyBytes_GET_SIZE(bytes) % (2 * (Py_ssize_t)sizeof(int64_t)))
            return bad("a child's pairs must be bytes of int64 pairs");
        Py_INCREF(PyTuple_GET_ITEM(child, 0));
        info->end_class[i] = state_result(PyTuple_GET_ITEM(child, 0));
        info->tails[i] = PyTuple_GET_ITEM(child, 2);
        info->tail_index[i] = info->end_class[i] == FAILED ? FAILED : int_attr(info->tails[i], w->s_index);
        if (info->tail_index[i] == FAILED) return -1;
        if (info->end_class[i] < 0 || info->tail_index[i] < 0) return bad("negative end class or set index");
        info->pairs[i] = (const int64_t *)PyBytes_AS_STRING(bytes);
        info->npairs[i] = PyBytes_GET_SIZE(bytes) / (2 * (Py_ssize_t)sizeof(int64_t));
    }
    return 0;
}

/* The SplitInfo of `split`, made the first time (it holds the split, so its address stays its key). */
static SplitInfo *split_info(ResidualWalker *w, PyObject *split) {
    uint64_t key = (uint64_t)(uintptr_t)split;
    int32_t at = u64_get(&w->info_of, key);
    if (at != UNKNOWN) return w->infos[at];
    if (w->ninfos >= INT32_MAX) return PyErr_SetString(PyExc_OverflowError, "too many splits"), NULL;
    SplitInfo *info = (SplitInfo *)calloc(1, sizeof(SplitInfo));
    if (!info) return PyErr_NoMemory(), NULL;
    Py_INCREF(split);
    info->split = split;
    if (info_fill(w, info, split) ||
        reserve((void **)&w->infos, &w->infos_cap, w->ninfos, sizeof(SplitInfo *), 64) ||
        u64_put(&w->info_of, key, (int32_t)w->ninfos)) {
        info_free(info);
        return NULL;
    }
    info->position = (int32_t)w->ninfos;
    w->infos[w->ninfos++] = info;
    return info;
}

/* The first split of `set` (index `index`) at lexer state `lid`, without loops. */
static SplitInfo *rw_first_split(ResidualWalker *w, PyObject *set, int32_t index, int32_t lid) {
    uint64_t key = (uint64_t)(uint32_t)index << 32 | (uint32_t)lid;
    int32_t at = u64_get(&w->splits, key);
    if (at != UNKNOWN) return w->infos[at];
    PyObject *lid_obj = PyLong_FromLong(lid);
    PyObject *split = lid_obj ? PyObject_CallFunctionObjArgs(w->split, set, lid_obj, w->no_loops, NULL) : NULL;
    Py_XDECREF(lid_obj);
    SplitInfo *info = split ? split_info(w, split) : NULL;
    Py_XDECREF(split);
    if (info && u64_put(&w->splits, key, info->position)) return NULL;
    return info;
}

/* The split of `set` at lexer state `lid` with the end classes of `info` (the split it has now) that
 * `mask` names followed in place as well (`LexerMaskComputer._split_in_place`): the split with those
 * loops, from Python the first time (new reference), remembered by `info` where `mask` can name them. */
static SplitInfo *rw_split_again(ResidualWalker *w, SplitInfo *info, PyObject *set, int32_t lid, uint64_t mask,
                                 const int32_t *resumed, int32_t pid) {
    int cached = info->count <= 64;
    for (Py_ssize_t k = 0; cached && k < info->nnext; k++) {
        if (info->next[k].mask == mask) return info->next[k].next;
    }
    PyObject *all = info->loops ? PySet_New(info->loops) : PySet_New(NULL);
    for (Py_ssize_t i = 0; all && i < info->count; i++) {
        if (resumed[i] != pid) continue;
        PyObject *cls = PyLong_FromLong(info->end_class[i]);
        if (!cls || PySet_Add(all, cls)) Py_CLEAR(all);
        Py_XDECREF(cls);
    }
    PyObject *loops = all ? PyFrozenSet_New(all) : NULL;
    Py_XDECREF(all);
    PyObject *lid_obj = loops ? PyLong_FromLong(lid) : NULL;
    PyObject *again = lid_obj ? PyObject_CallFunctionObjArgs(w->split, set, lid_obj, loops, NULL) : NULL;
    Py_XDECREF(lid_obj);
    SplitInfo *next = again ? split_info(w, again) : NULL; /* (the info holds the split) */
    Py_XDECREF(again);
    if (next && (next == info || (info->loops && PySet_GET_SIZE(loops) <= PySet_GET_SIZE(info->loops)))) {
        /* more loops each time, or the cached loop below would spin for ever */
        PyErr_SetString(PyExc_RuntimeError, "split() followed no more loops than before");
        next = NULL;
    }
    if (next && !next->loops) {
        Py_INCREF(loops);
        next->loops = loops;
    }
    Py_XDECREF(loops);
    if (next && cached) {
        if (reserve((void **)&info->next, &info->next_cap, info->nnext, sizeof(*info->next), 2)) return NULL;
        info->next[info->nnext++] = (struct LoopStep){mask, next};
    }
    return next;
}

/* The split of `set` at parser state `pid` with the lexemes that leave `pid` as it was followed in
 * place (`LexerMaskComputer._split_in_place`), and the parser state after each child's lexeme in
 * `resumed` (which it allocates; the caller frees it). */
static SplitInfo *rw_split(ResidualWalker *w, int32_t pid, PyObject *set, int32_t index, int32_t **resumed) {
    int32_t lid = rw_fresh(w, pid);
    if (lid == FAILED) return NULL;
    SplitInfo *info = rw_first_split(w, set, index, lid);
    *resumed = NULL;
    while (info) {
        Py_ssize_t n = info->count, i;
        uint64_t mask = 0;
        int loops = 0;
        free(*resumed);
        *resumed = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
        if (!*resumed) {
            PyErr_NoMemory();
            break;
        }
        for (i = 0; i < n; i++) {
            int32_t nxt = rw_after(w, pid, info->end_class[i]);
            if (nxt == FAILED) break;
            (*resumed)[i] = nxt;
            if (nxt == pid) {
                loops = 1;
                if (i < 64) mask |= (uint64_t)1 << i;
            }
        }
        if (i < n) break;
        if (!loops) return info;
        info = rw_split_again(w, info, set, lid, mask, *resumed, pid);
    }
    free(*resumed);
    *resumed = NULL;
    return NULL;
}

/* ok[member] |= accepted[tail] over one child's (member, tail) int64 pairs. */
static int rw_merge(char *ok, Py_ssize_t count, const int64_t *p, Py_ssize_t n, PyObject *sub) {
    const char *a = PyBytes_AS_STRING(sub);
    Py_ssize_t len = PyBytes_GET_SIZE(sub);
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t member = p[2 * j], tail = p[2 * j + 1];
        if (member < 0 || member >= count || tail < 0 || tail >= len) return index_error("residual member out of range");
        if (a[tail]) ok[member] = 1;
    }
    return 0;
}

/* The result kept for `key` (moved to the young generation if old), UNKNOWN, or FAILED. */
static int32_t rw_kept(ResidualWalker *w, uint64_t key) {
    int32_t found = u64_get(&w->young, key);
    if (found != UNKNOWN) return found;
    found = u64_get(&w->old, key);
    if (found != UNKNOWN && u64_put(&w->young, key, found)) return FAILED;
    return found;
}

/* Keep `result` for `key`; when the young generation is full it becomes the old one. */
static int rw_keep(ResidualWalker *w, uint64_t key, int32_t result) {
    if (u64_put(&w->young, key, result)) return -1;
    if (w->young.used < w->limit) return 0;
    U64Map empty;
    if (u64_init(&empty, 12)) return -1;
    free(w->old.keys);
    free(w->old.values);
    w->old = w->young;
    w->young = empty;
    return 0;
}

/* What a distinct result costs besides its flags, for `result_bytes`: the bytes object's header, its
 * list slot, its dict entry and number (CPython 3.11 on 64 bits, roughly). */
#define RESULT_OVERHEAD 112

/* The number of the result whose flags are `flags` (a new bytes object, which it steals), or FAILED. */
static int32_t rw_intern(ResidualWalker *w, PyObject *flags) {
    PyObject *found = PyDict_GetItemWithError(w->contents, flags); /* (borrowed: numbers we made) */
    int32_t result = found ? (int32_t)PyLong_AsLong(found) : FAILED;
    if (found || PyErr_Occurred()) {
        Py_DECREF(flags);
        return result;
    }
    Py_ssize_t number = PyList_GET_SIZE(w->results);
    PyObject *key = number < INT32_MAX ? PyLong_FromSsize_t(number) : NULL;
    if (!key && !PyErr_Occurred()) PyErr_SetString(PyExc_OverflowError, "too many results");
    if (key && !PyList_Append(w->results, flags) && !PyDict_SetItem(w->contents, flags, key)) {
        result = (int32_t)number;
        w->result_bytes += PyBytes_GET_SIZE(flags) + RESULT_OVERHEAD;
    }
    Py_XDECREF(key);
    Py_DECREF(flags);
    return result;
}

static uint64_t combo_hash(int32_t position, const int32_t *children, Py_ssize_t n) {
    return node_hash(position, children, n);
}

/* The result of `info`'s split whose children's lexemes lead to the results `children` (-1: dead):
 * its flags, each member's own or its tail's in its child's result. Remembered by the combo. */
static int32_t rw_combined(ResidualWalker *w, SplitInfo *info, const int32_t *children) {
    Py_ssize_t n = info->count;
    uint64_t h = combo_hash(info->position, children, n);
    int32_t at = u64_get(&w->combos, h);
    if (at != UNKNOWN && w->combo_keys[at] == info->position &&
        (!n || !memcmp(w->combo_keys + at + 2, children, (size_t)n * sizeof(int32_t)))) {
        return w->combo_keys[at + 1];
    }
    /* (made from NULL: a one-byte bytes made from a string is the shared singleton of that byte) */
    PyObject *flags = PyBytes_FromStringAndSize(NULL, info->members);
    if (flags) memcpy(PyBytes_AS_STRING(flags), info->flags, (size_t)info->members);
    for (Py_ssize_t i = 0; flags && i < n; i++) {
        if (children[i] >= 0 && rw_merge(PyBytes_AS_STRING(flags), info->members, info->pairs[i], info->npairs[i],
                                         PyList_GET_ITEM(w->results, children[i]))) {
            Py_CLEAR(flags);
        }
    }
    int32_t result = flags ? rw_intern(w, flags) : FAILED;
    if (result == FAILED || at != UNKNOWN) return result; /* (a combo of the same hash keeps its place) */
    if (w->combo_size + n + 2 > INT32_MAX) return result;
    while (w->combo_size + n + 2 > w->combo_cap) {
        if (reserve((void **)&w->combo_keys, &w->combo_cap, w->combo_cap, sizeof(int32_t), 4096)) return FAILED;
    }
    int32_t *key = w->combo_keys + w->combo_size;
    key[0] = info->position;
    key[1] = result;
    if (n) memcpy(key + 2, children, (size_t)n * sizeof(int32_t));
    if (u64_put(&w->combos, h, (int32_t)w->combo_size)) return FAILED;
    w->combo_size += n + 2;
    w->result_bytes += (n + 2) * (Py_ssize_t)sizeof(int32_t) + (Py_ssize_t)sizeof(uint64_t) * 4; /* (and its map slots) */
    return result;
}

/* Which residuals of `set` (index `index`) parser state `pid` accepts: the number of the result (its
 * flags, a byte of 0/1 per member, are `results[number]`), or FAILED. */
static int32_t rw_result(ResidualWalker *w, int32_t pid, PyObject *set, int32_t index) {
    uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)index;
    int32_t result = rw_kept(w, key);
    if (result != UNKNOWN) return result;
    int32_t *resumed = NULL;
    SplitInfo *info = rw_split(w, pid, set, index, &resumed);
    if (!info) return FAILED;
    int32_t few[16], *children = info->count <= 16 ? few : (int32_t *)malloc((size_t)info->count * sizeof(int32_t));
    result = children ? 0 : (PyErr_NoMemory(), FAILED);
    for (Py_ssize_t i = 0; result != FAILED && i < info->count; i++) {
        children[i] = resumed[i] == DEAD ? -1 : rw_result(w, resumed[i], info->tails[i], info->tail_index[i]);
        if (children[i] == FAILED) result = FAILED;
    }
    if (result != FAILED) result = rw_combined(w, info, children);
    if (children != few) free(children);
    free(resumed);
    if (result != FAILED && rw_keep(w, key, result)) result = FAILED;
    return result;
}

static PyObject *rw_call(ResidualWalker *w, PyObject *args) {
    int pid;
    PyObject *set;
    if (!PyArg_ParseTuple(args, "iO", &pid, &set)) return NULL;
    if (pid < 0) return index_error("parser state out of range"), NULL;
    int32_t index = int_attr(set, w->s_index);
    if (index == FAILED) return NULL;
    if (index < 0) return PyErr_Format(PyExc_ValueError, "residual set without an index"), NULL;
    w->walking++;
    int32_t result = rw_result(w, pid, set, index);
    w->walking--;
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

static PyObject *rw_flags(ResidualWalker *w, PyObject *arg) {
    Py_ssize_t number = PyLong_AsSsize_t(arg);
    if (number == -1 && PyErr_Occurred()) return NULL;
    if (number < 0 || number >= PyList_GET_SIZE(w->results)) return index_error("result out of range"), NULL;
    PyObject *flags = PyList_GET_ITEM(w->results, number);
    Py_INCREF(flags);
    return flags;
}

static PyObject *rw_clear(ResidualWalker *w, PyObject *Py_UNUSED(ignored)) {
    /* (from another thread while a walk waits in `split`: the walk's numbers would name other flags) */
    if (w->walking) return PyErr_Format(PyExc_RuntimeError, "clear() while a walk is in progress"), NULL;
    PyObject *empty = PyList_New(0);
    if (!empty) return NULL;
    Py_SETREF(w->results, empty);
    PyDict_Clear(w->contents);
    w->result_bytes = 0;
    u64_clear(&w->young);
    u64_clear(&w->old);
    u64_clear(&w->combos);
    w->combo_size = 0;
    Py_RETURN_NONE;
}

static PyObject *rw_get_result_bytes(ResidualWalker *w, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(w->result_bytes);
}

static PyMethodDef rw_methods[] = {
    {"result", (PyCFunction)rw_call, METH_VARARGS,
     "result(pid, residuals) -> int: the number of the result, which residuals of the set parser state pid accepts"},
    {"flags", (PyCFunction)rw_flags, METH_O, "flags(result) -> bytes: per member of the set, 1 if accepted"},
    {"clear", (PyCFunction)rw_clear, METH_NOARGS,
     "clear(): forget every result (their numbers are then given again); splits and parser steps are kept"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rw_getset[] = {
    {"result_bytes", (getter)rw_get_result_bytes, NULL,
     "what the distinct results and the remembered combinations take, in bytes (roughly)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ResidualWalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.ResidualWalker",
    .tp_basicsize = sizeof(ResidualWalker),
    .tp_dealloc = (destructor)rw_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ResidualWalker(steps, split, limit): LexerMaskComputer._residuals_accepted in C, hash-consed",
    .tp_methods = rw_methods,
    .tp_getset = rw_getset,
    .tp_new = rw_new,
};

/* ---------------------------------------------------------------------------------------------
 * A rule's automaton (`automaton._build_dfa`; `determinize`, `trim` and `minimize` in Python).
 *
 * `dfa_of_nfa` takes a Thompson NFA as flat int32 lists (epsilon edges, symbol-range edges and call
 * edges) and makes its subset construction, trims the states that cannot reach acceptance, and
 * minimises what is left (Valmari and Lehtinen's partition refinement for partial automata, with
 * each callee rule a symbol of its own), numbering the states exactly as the Python functions do:
 * subsets in the order they are first met (per subset its symbol ranges in increasing order, then
 * its calls by rule), and the minimal automaton's classes in the order of their first state, the
 * start first. A rule of a JSON Schema took milliseconds in numpy and Python; here microseconds.
 * ------------------------------------------------------------------------------------------- */

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

static uint64_t seq_hash(const int32_t *a, Py_ssize_t n) {
    uint64_t h = 0x84222325CBF29CE4ull ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint32_t)a[i]) * 0x100000001B3ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 33);
}

static void seqmap_free(SeqMap *m) {
    free(m->pool.data);
    free(m->off);
    free(m->len);
    free(m->value);
    free(m->hash);
    free(m->slots);
}

static int seqmap_rehash(SeqMap *m, int bits) {
    int32_t *slots = (int32_t *)malloc(((size_t)1 << bits) * sizeof(int32_t));
    if (!slots) return PyErr_NoMemory(), -1;
    memset(slots, 0xFF, ((size_t)1 << bits) * sizeof(int32_t));
    size_t mask = ((size_t)1 << bits) - 1;
    for (Py_ssize_t k = 0; k < m->count; k++) {
        size_t i = (size_t)(m->hash[k] >> (64 - bits));
        while (slots[i] >= 0) i = (i + 1) & mask;
        slots[i] = (int32_t)k;
    }
    free(m->slots);
    m->slots = slots;
    m->bits = bits;
    return 0;
}

/* The value of the `n` ints at `a` (hash `h`), or -1. */
static int32_t seqmap_get(const SeqMap *m, const int32_t *a, Py_ssize_t n, uint64_t h) {
    if (!m->slots) return -1;
    size_t mask = ((size_t)1 << m->bits) - 1, i = (size_t)(h >> (64 - m->bits));
    for (int32_t k; (k = m->slots[i]) >= 0; i = (i + 1) & mask) {
        if (m->hash[k] == h && m->len[k] == n && !memcmp(m->pool.data + m->off[k], a, (size_t)n * sizeof(int32_t)))
            return m->value[k];
    }
    return -1;
}

/* Record the `n` ints at `a` (hash `h`, not in the map yet; `a` must not point into the pool) with `value`. */
static int seqmap_put(SeqMap *m, const int32_t *a, Py_ssize_t n, uint64_t h, int32_t value) {
    if (m->count + 1 > m->cap) {
        Py_ssize_t cap = m->cap ? 2 * m->cap : 64;
        int64_t *off = (int64_t *)realloc(m->off, (size_t)cap * sizeof(int64_t));
        if (off) m->off = off;
        int32_t *len = off ? (int32_t *)realloc(m->len, (size_t)cap * sizeof(int32_t)) : NULL;
        if (len) m->len = len;
        int32_t *val = len ? (int32_t *)realloc(m->value, (size_t)cap * sizeof(int32_t)) : NULL;
        if (val) m->value = val;
        uint64_t *hs = val ? (uint64_t *)realloc(m->hash, (size_t)cap * sizeof(uint64_t)) : NULL;
        if (!hs) return PyErr_NoMemory(), -1;
        m->hash = hs;
        m->cap = cap;
    }
    if (2 * (m->count + 1) > ((Py_ssize_t)1 << m->bits) && seqmap_rehash(m, m->bits ? m->bits + 1 : 8)) return -1;
    Py_ssize_t k = m->count++;
    m->off[k] = m->pool.size;
    m->len[k] = (int32_t)n;
    m->value[k] = value;
    m->hash[k] = h;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (buf_push(&m->pool, a[i])) return -1;
    }
    size_t mask = ((size_t)1 << m->bits) - 1, i = (size_t)(h >> (64 - m->bits));
    while (m->slots[i] >= 0) i = (i + 1) & mask;
    m->slots[i] = (int32_t)k;
    return 0;
}

/* Valmari and Lehtinen's refinable partition: the elements grouped by set in `E`, each element's
 * place `L` and set `S`, each set's range `F`..`P` in `E`; `M` and `W` count the marked elements
 * per set and list the sets with marks (shared by the two partitions, sized for the larger). */
typedef struct {
    int32_t z, *E, *L, *S, *F, *P;
} Refinable;

typedef struct {
    int32_t *M, *W, w;
} Marks;

static int refinable_init(Refinable *p, Py_ssize_t n) {
    size_t size = (size_t)(n ? n : 1) * sizeof(int32_t);
    p->E = (int32_t *)malloc(size);
    p->L = (int32_t *)malloc(size);
    p->S = (int32_t *)malloc(size);
    p->F = (int32_t *)malloc(size);
    p->P = (int32_t *)malloc(size);
    if (!p->E || !p->L || !p->S || !p->F || !p->P) return PyErr_NoMemory(), -1;
    p->z = n > 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        p->E[i] = p->L[i] = (int32_t)i;
        p->S[i] = 0;
    }
    if (n) {
        p->F[0] = 0;
        p->P[0] = (int32_t)n;
    }
    return 0;
}

static void refinable_free(Refinable *p) {
    free(p->E);
    free(p->L);
    free(p->S);
    free(p->F);
    free(p->P);
}

static void refinable_mark(Refinable *p, Marks *k, int32_t e) {
    int32_t s = p->S[e], i = p->L[e], j = p->F[s] + k->M[s];
    p->E[i] = p->E[j];
    p->L[p->E[i]] = i;
    p->E[j] = e;
    p->L[e] = j;
    if (!k->M[s]++) k->W[k->w++] = s;
}

static void refinable_split(Refinable *p, Marks *k) {
    while (k->w) {
        int32_t s = k->W[--k->w], j = p->F[s] + k->M[s];
        if (j == p->P[s]) {
            k->M[s] = 0;
            continue;
        }
        int32_t z = p->z;
        if (k->M[s] <= p->P[s] - j) {
            p->F[z] = p->F[s];
            p->P[z] = p->F[s] = j;
        } else {
            p->P[z] = p->P[s];
            p->F[z] = p->P[s] = j;
        }
        for (int32_t i = p->F[z]; i < p->P[z]; ++i) p->S[p->E[i]] = z;
        k->M[s] = k->M[z] = 0;
        p->z++;
    }
}

/* The classes of the language-equivalent states of a trimmed automaton of `n` states (every state
 * reachable, and able to accept) with `m` transitions `tail[t] --label[t]--> head[t]` (labels
 * below `labels`): `cls` gets each state's class. */
static int equivalent_states(Py_ssize_t n, Py_ssize_t m, const int32_t *tail, const int32_t *label,
                             const int32_t *head, Py_ssize_t labels, const uint8_t *accepting, int32_t *cls) {
    Refinable B = {0}, C = {0};
    Marks k = {0};
    int32_t *adj_first = NULL, *adj = NULL, *count = NULL;
    int status = -1;
    size_t big = (size_t)(n > m ? n : m) + 1;
    k.M = (int32_t *)calloc(big, sizeof(int32_t));
    k.W = (int32_t *)malloc(big * sizeof(int32_t));
    adj_first = (int32_t *)calloc((size_t)n + 1, sizeof(int32_t));
    adj = (int32_t *)malloc((size_t)(m ? m : 1) * sizeof(int32_t));
    count = (int32_t *)calloc((size_t)labels + 1, sizeof(int32_t));
    if (!k.M || !k.W || !adj_first || !adj || !count) {
        PyErr_NoMemory();
        goto done;
    }
    if (refinable_init(&B, n) || refinable_init(&C, m)) goto done;
    for (Py_ssize_t q = 0; q < n; q++) {
        if (accepting[q]) refinable_mark(&B, &k, (int32_t)q);
    }
    refinable_split(&B, &k);
    if (m) {
        /* the transitions grouped by label (a counting sort) */
        for (Py_ssize_t t = 0; t < m; t++) count[label[t] + 1]++;
        for (Py_ssize_t a = 0; a < labels; a++) count[a + 1] += count[a];
        for (Py_ssize_t t = 0; t < m; t++) {
            int32_t at = count[label[t]]++;
            C.E[at] = (int32_t)t;
            C.L[t] = at;
        }
        C.z = 0;
        int32_t a = label[C.E[0]];
        C.F[0] = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            int32_t t = C.E[i];
            if (label[t] != a) {
                a = label[t];
                C.P[C.z++] = (int32_t)i;
                C.F[C.z] = (int32_t)i;
            }
            C.S[t] = C.z;
        }
        C.P[C.z++] = (int32_t)m;
    }
    /* transitions by head state */
    for (Py_ssize_t t = 0; t < m; t++) adj_first[head[t] + 1]++;
    for (Py_ssize_t q = 0; q < n; q++) adj_first[q + 1] += adj_first[q];
    for (Py_ssize_t t = 0; t < m; t++) adj[adj_first[head[t]]++] = (int32_t)t;
    for (Py_ssize_t q = n; q > 0; q--) adj_first[q] = adj_first[q - 1];
    adj_first[0] = 0;
    for (int32_t b = 1, c = 0; c < C.z;) {
        for (int32_t i = C.F[c]; i < C.P[c]; ++i) refinable_mark(&B, &k, tail[C.E[i]]);
        refinable_split(&B, &k);
        ++c;
        for (; b < B.z; ++b) {
            for (int32_t i = B.F[b]; i < B.P[b]; ++i) {
                for (int32_t j = adj_first[B.E[i]]; j < adj_first[B.E[i] + 1]; ++j) refinable_mark(&C, &k, adj[j]);
            }
            refinable_split(&C, &k);
        }
    }
    for (Py_ssize_t q = 0; q < n; q++) cls[q] = B.S[q];
    status = 0;
done:
    refinable_free(&B);
    refinable_free(&C);
    free(k.M);
    free(k.W);
    free(adj_first);
    free(adj);
    free(count);
    return status;
}

/* The NFA's edges of each kind, grouped by source state (`lo[s]:lo[s + 1]` into `item`, `width` ints each). */
typedef struct {
    int32_t *lo, *item;
} Grouped;

static int group_by_source(const int32_t *flat, Py_ssize_t count, int width, Py_ssize_t states, Grouped *g) {
    g->lo = (int32_t *)calloc((size_t)states + 1, sizeof(int32_t));
    g->item = (int32_t *)malloc((size_t)(count ? count * width : 1) * sizeof(int32_t));
    if (!g->lo || !g->item) return PyErr_NoMemory(), -1;
    for (Py_ssize_t e = 0; e < count; e++) {
        int32_t src = flat[e * width];
        if (src < 0 || src >= states) return bad("NFA edge from a state out of range");
        g->lo[src + 1]++;
    }
    for (Py_ssize_t s = 0; s < states; s++) g->lo[s + 1] += g->lo[s];
    int32_t *at = (int32_t *)malloc((size_t)(states ? states : 1) * sizeof(int32_t));
    if (!at) return PyErr_NoMemory(), -1;
    memcpy(at, g->lo, (size_t)states * sizeof(int32_t));
    for (Py_ssize_t e = 0; e < count; e++) {
        int32_t src = flat[e * width];
        memcpy(g->item + (Py_ssize_t)at[src]++ * (width - 1), flat + e * width + 1, (size_t)(width - 1) * sizeof(int32_t));
    }
    free(at);
    return 0;
}

static void grouped_free(Grouped *g) {
    free(g->lo);
    free(g->item);
}

/* The subset construction's working state. */
typedef struct {
    Py_ssize_t states, alphabet, max_states;
    int32_t final;
    Grouped eps, edges, calls;
    uint32_t *seen, gen;  /* per NFA state: the closure that reached it */
    IntBuf stack, set;    /* a closure's work list and its states */
    SeqMap subsets;       /* closure -> DFA state (its key in the pool is the subset's members) */
    SeqMap closures;      /* target set -> DFA state */
    IntBuf segs;          /* the DFA's transitions: (lo, hi, target) symbol ranges, state after state */
    IntBuf seg_first;     /* per DFA state: where its ranges start in `segs` (in triples), and the end */
    IntBuf accepting, call_out; /* per DFA state 0/1; (state, rule, target) triples */
} Subsets;

static int cmp_pair(const void *a, const void *b) {
    const int32_t *x = (const int32_t *)a, *y = (const int32_t *)b;
    if (x[0] != y[0]) return (x[0] > y[0]) - (x[0] < y[0]);
    return (x[1] > y[1]) - (x[1] < y[1]);
}

/* The DFA state of the epsilon closure of the sorted, distinct NFA states `targets` (`n` of them),
 * interned (with a new transition row) if new; -1 on error. */
static int32_t subset_of_targets(Subsets *d, const int32_t *targets, Py_ssize_t n) {
    uint64_t h = seq_hash(targets, n);
    int32_t found = seqmap_get(&d->closures, targets, n, h);
    if (found >= 0) return found;
    if (++d->gen == 0) {
        memset(d->seen, 0, (size_t)d->states * sizeof(uint32_t));
        d->gen = 1;
    }
    d->stack.size = d->set.size = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (d->seen[targets[i]] == d->gen) continue;
        d->seen[targets[i]] = d->gen;
        if (buf_push(&d->stack, targets[i]) || buf_push(&d->set, targets[i])) return -1;
    }
    while (d->stack.size) {
        int32_t s = d->stack.data[--d->stack.size];
        for (int32_t k = d->eps.lo[s]; k < d->eps.lo[s + 1]; k++) {
            int32_t t = d->eps.item[k];
            if (d->seen[t] == d->gen) continue;
            d->seen[t] = d->gen;
            if (buf_push(&d->stack, t) || buf_push(&d->set, t)) return -1;
        }
    }
    qsort(d->set.data, (size_t)d->set.size, sizeof(int32_t), cmp_int32);
    uint64_t hs = seq_hash(d->set.data, d->set.size);
    int32_t id = seqmap_get(&d->subsets, d->set.data, d->set.size, hs);
    if (id < 0) {
        id = (int32_t)d->subsets.count;
        if (id >= d->max_states) {
            PyErr_Format(PyExc_OverflowError, "more than %zd deterministic automaton states", d->max_states);
            return -1;
        }
        if (seqmap_put(&d->subsets, d->set.data, d->set.size, hs, id)) return -1;
        if (buf_push(&d->accepting, d->seen[d->final] == d->gen)) return -1;
    }
    return seqmap_put(&d->closures, targets, n, h, id) ? -1 : id;
}

/* The transitions and calls of DFA state `id` (its subset's members in the pool). */
static int expand_subset(Subsets *d, int32_t id, IntBuf *scratch, int32_t *open_count) {
    IntBuf *events = &scratch[0], *open = &scratch[1], *targets = &scratch[2], *pairs = &scratch[3];
    events->size = open->size = pairs->size = 0;
    if (buf_push(&d->seg_first, (int32_t)(d->segs.size / 3))) return -1;
    Py_ssize_t members = d->subsets.len[id];
    for (Py_ssize_t i = 0; i < members; i++) {
        int32_t s = d->subsets.pool.data[d->subsets.off[id] + i];
        for (int32_t e = d->edges.lo[s]; e < d->edges.lo[s + 1]; e++) {
            const int32_t *edge = d->edges.item + 3 * (Py_ssize_t)e; /* lo, hi, target */
            if (edge[0] < 0 || edge[1] < edge[0] || edge[1] >= d->alphabet || edge[2] < 0 || edge[2] >= d->states)
                return bad("NFA edge with a symbol range or target out of range");
            /* an event: (point, +target + 1 opens / -target - 1 closes) */
            if (buf_push(events, edge[0]) || buf_push(events, edge[2] + 1) || buf_push(events, edge[1] + 1) ||
                buf_push(events, -edge[2] - 1))
                return -1;
        }
        for (int32_t c = d->calls.lo[s]; c < d->calls.lo[s + 1]; c++) {
            const int32_t *call = d->calls.item + 2 * (Py_ssize_t)c; /* rule, target */
            if (call[0] < 0 || call[1] < 0 || call[1] >= d->states) return bad("NFA call out of range");
            if (buf_push(pairs, call[0]) || buf_push(pairs, call[1])) return -1;
        }
    }
    Py_ssize_t count = events->size / 2;
    qsort(events->data, (size_t)count, 2 * sizeof(int32_t), cmp_pair);
    for (Py_ssize_t i = 0; i < count;) {
        int32_t point = events->data[2 * i];
        for (; i < count && events->data[2 * i] == point; i++) {
            int32_t ev = events->data[2 * i + 1];
            if (ev > 0) {
                if (!open_count[ev - 1]++ && buf_push(open, ev - 1)) return -1;
            } else {
                open_count[-ev - 1]--;
            }
        }
        if (i == count || point >= d->alphabet) break;
        int32_t next = events->data[2 * i];
        targets->size = 0;
        Py_ssize_t kept = 0;
        for (Py_ssize_t k = 0; k < open->size; k++) {
            int32_t t = open->data[k];
            if (!open_count[t]) continue;
            open->data[kept++] = t;
            if (buf_push(targets, t)) return -1;
        }
        open->size = kept;
        if (!targets->size) continue;
        qsort(targets->data, (size_t)targets->size, sizeof(int32_t), cmp_int32);
        Py_ssize_t unique = 1;
        for (Py_ssize_t k = 1; k < targets->size; k++) {
            if (targets->data[k] != targets->data[unique - 1]) targets->data[unique++] = targets->data[k];
        }
        targets->size = unique;
        int32_t to = subset_of_targets(d, targets->data, targets->size);
        if (to < 0) return -1;
        int32_t last = (next < d->alphabet ? next : (int32_t)d->alphabet) - 1;
        Py_ssize_t have = d->segs.size;
        if (have / 3 > d->seg_first.data[id] && d->segs.data[have - 1] == to && d->segs.data[have - 2] == point - 1) {
            d->segs.data[have - 2] = last; /* (adjacent ranges to one target: one range) */
        } else if (buf_push(&d->segs, point) || buf_push(&d->segs, last) || buf_push(&d->segs, to)) {
            return -1;
        }
    }
    for (Py_ssize_t k = 0; k < open->size; k++) open_count[open->data[k]] = 0;
    /* calls, by rule: the closure of each rule's targets */
    Py_ssize_t calls = pairs->size / 2;
    qsort(pairs->data, (size_t)calls, 2 * sizeof(int32_t), cmp_pair);
    for (Py_ssize_t i = 0; i < calls;) {
        int32_t rule = pairs->data[2 * i];
        targets->size = 0;
        for (; i < calls && pairs->data[2 * i] == rule; i++) {
            int32_t t = pairs->data[2 * i + 1];
            if ((!targets->size || targets->data[targets->size - 1] != t) && buf_push(targets, t)) return -1;
        }
        int32_t to = subset_of_targets(d, targets->data, targets->size);
        if (to < 0 || buf_push(&d->call_out, id) || buf_push(&d->call_out, rule) || buf_push(&d->call_out, to)) return -1;
    }
    return 0;
}

/* The minimal DFA of an NFA of `states` states given as flat int32 lists of `n_eps` epsilon edges
 * (source, target), `n_edges` symbol ranges (source, lo, hi, target) and `n_calls` calls (source,
 * rule, target): (trans, accepting, calls) bytes, or NULL with an exception set. */
static PyObject *dfa_of_nfa(Py_ssize_t states, int start, int final, const int32_t *eps_flat, Py_ssize_t n_eps,
                            const int32_t *edges_flat, Py_ssize_t n_edges, const int32_t *calls_flat,
                            Py_ssize_t n_calls, Py_ssize_t alphabet, Py_ssize_t max_states) {
    PyObject *result = NULL;
    Subsets d;
    memset(&d, 0, sizeof(d));
    IntBuf scratch[4];
    memset(scratch, 0, sizeof(scratch));
    int32_t *open_count = NULL, *alive_map = NULL, *stack = NULL, *tail = NULL, *label = NULL, *head = NULL;
    int32_t *cls = NULL, *order = NULL, *rev_lo = NULL, *rev = NULL;
    uint8_t *alive = NULL, *acc = NULL;
    d.states = states;
    d.alphabet = alphabet;
    d.max_states = max_states;
    d.final = final;
    if (states < 1 || start < 0 || start >= states || final < 0 || final >= states || alphabet < 1 ||
        alphabet > 65536) {
        bad("dfa_of_nfa: states, start, final or alphabet out of range");
        goto done;
    }
    if (group_by_source(eps_flat, n_eps, 2, states, &d.eps) || group_by_source(edges_flat, n_edges, 4, states, &d.edges) ||
        group_by_source(calls_flat, n_calls, 3, states, &d.calls))
        goto done;
    for (Py_ssize_t k = 0; k < n_eps; k++) {
        if (d.eps.item[k] < 0 || d.eps.item[k] >= states) {
            bad("NFA epsilon edge to a state out of range");
            goto done;
        }
    }
    d.seen = (uint32_t *)calloc((size_t)states, sizeof(uint32_t));
    open_count = (int32_t *)calloc((size_t)states, sizeof(int32_t));
    if (!d.seen || !open_count) {
        PyErr_NoMemory();
        goto done;
    }
    int32_t first = start;
    if (subset_of_targets(&d, &first, 1) < 0) goto done;
    for (int32_t id = 0; id < (int32_t)d.subsets.count; id++) {
        if (expand_subset(&d, id, scratch, open_count)) goto done;
    }
    if (buf_push(&d.seg_first, (int32_t)(d.segs.size / 3))) goto done;
    /* trim: the states from which acceptance is reachable (symbol and call edges alike) */
    Py_ssize_t n = d.subsets.count, ncalls = d.call_out.size / 3, nsegs = d.segs.size / 3;
    const int32_t *segs = d.segs.data, *seg_first = d.seg_first.data;
    rev_lo = (int32_t *)calloc((size_t)n + 1, sizeof(int32_t));
    alive = (uint8_t *)calloc((size_t)n, 1);
    stack = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    rev = (int32_t *)malloc((size_t)(nsegs + ncalls + 1) * sizeof(int32_t));
    int32_t *fill = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!rev_lo || !alive || !stack || !rev || !fill) {
        free(fill);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < nsegs; k++) rev_lo[segs[3 * k + 2] + 1]++;
    for (Py_ssize_t c = 0; c < ncalls; c++) rev_lo[d.call_out.data[3 * c + 2] + 1]++;
    for (Py_ssize_t q = 0; q < n; q++) rev_lo[q + 1] += rev_lo[q];
    memcpy(fill, rev_lo, (size_t)n * sizeof(int32_t));
    for (Py_ssize_t q = 0; q < n; q++) {
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) rev[fill[segs[3 * k + 2]]++] = (int32_t)q;
    }
    for (Py_ssize_t c = 0; c < ncalls; c++) rev[fill[d.call_out.data[3 * c + 2]]++] = d.call_out.data[3 * c];
    free(fill);
    Py_ssize_t top = 0;
    for (Py_ssize_t q = 0; q < n; q++) {
        if (d.accepting.data[q]) {
            alive[q] = 1;
            stack[top++] = (int32_t)q;
        }
    }
    while (top) {
        int32_t t = stack[--top];
        for (int32_t k = rev_lo[t]; k < rev_lo[t + 1]; k++) {
            if (!alive[rev[k]]) {
                alive[rev[k]] = 1;
                stack[top++] = rev[k];
            }
        }
    }
    alive[0] = 1; /* (an empty language keeps a lone start state) */
    alive_map = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!alive_map) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t q = 0; q < n; q++) alive_map[q] = alive[q] ? (int32_t)kept++ : -1;
    /* the kept automaton's transitions, over the symbol intervals between every range's ends */
    IntBuf bounds = {0};
    for (Py_ssize_t q = 0; q < n; q++) {
        if (!alive[q]) continue;
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) {
            if (alive_map[segs[3 * k + 2]] < 0) continue;
            if (buf_push(&bounds, segs[3 * k]) || buf_push(&bounds, segs[3 * k + 1] + 1)) {
                free(bounds.data);
                goto done;
            }
        }
    }
    qsort(bounds.data, (size_t)bounds.size, sizeof(int32_t), cmp_int32);
    Py_ssize_t classes = 0;
    for (Py_ssize_t i = 0; i < bounds.size; i++) {
        if (!classes || bounds.data[i] != bounds.data[classes - 1]) bounds.data[classes++] = bounds.data[i];
    }
    /* (interval k is bounds[k] .. bounds[k + 1] - 1; the last bound only ends one) */
    Py_ssize_t m = 0, max_rule = -1, cap = 0;
    for (Py_ssize_t c = 0; c < ncalls; c++) {
        if (d.call_out.data[3 * c + 1] > max_rule) max_rule = d.call_out.data[3 * c + 1];
    }
    for (Py_ssize_t q = 0; q < n; q++) {
        if (!alive[q]) continue;
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) {
            if (alive_map[segs[3 * k + 2]] < 0) continue;
            int32_t *at = (int32_t *)bsearch(&segs[3 * k], bounds.data, (size_t)classes, sizeof(int32_t), cmp_int32);
            int32_t *past = (int32_t *)bsearch(&(int32_t){segs[3 * k + 1] + 1}, bounds.data, (size_t)classes,
                                               sizeof(int32_t), cmp_int32);
            cap += past - at;
        }
    }
    cap += ncalls;
    tail = (int32_t *)malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    label = (int32_t *)malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    head = (int32_t *)malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    acc = (uint8_t *)malloc((size_t)kept);
    cls = (int32_t *)malloc((size_t)kept * sizeof(int32_t));
    if (!tail || !label || !head || !acc || !cls) {
        free(bounds.data);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < n; q++) {
        if (!alive[q]) continue;
        acc[alive_map[q]] = (uint8_t)d.accepting.data[q];
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) {
            int32_t t = alive_map[segs[3 * k + 2]];
            if (t < 0) continue;
            int32_t *at = (int32_t *)bsearch(&segs[3 * k], bounds.data, (size_t)classes, sizeof(int32_t), cmp_int32);
            for (int32_t c = (int32_t)(at - bounds.data); bounds.data[c] <= segs[3 * k + 1]; c++) {
                tail[m] = alive_map[q];
                label[m] = c;
                head[m++] = t;
            }
        }
    }
    free(bounds.data);
    for (Py_ssize_t c = 0; c < ncalls; c++) {
        const int32_t *call = d.call_out.data + 3 * c;
        if (!alive[call[0]] || alive_map[call[2]] < 0) continue;
        tail[m] = alive_map[call[0]];
        label[m] = (int32_t)(classes + call[1]);
        head[m++] = alive_map[call[2]];
    }
    if (equivalent_states(kept, m, tail, label, head, classes + max_rule + 1, acc, cls)) goto done;
    /* number the classes in the order of their first state (the start first) */
    order = (int32_t *)malloc((size_t)(kept ? kept : 1) * sizeof(int32_t));
    int32_t *rep = (int32_t *)malloc((size_t)(kept ? kept : 1) * sizeof(int32_t));
    if (!order || !rep) {
        free(rep);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < kept; q++) order[q] = -1;
    Py_ssize_t final_count = 0;
    for (Py_ssize_t q = 0; q < kept; q++) {
        if (order[cls[q]] < 0) {
            order[cls[q]] = (int32_t)final_count;
            rep[final_count++] = (int32_t)q;
        }
    }
    int32_t *kept_state = (int32_t *)malloc((size_t)(kept ? kept : 1) * sizeof(int32_t)); /* kept -> DFA state */
    if (!kept_state) {
        free(rep);
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < n; q++) {
        if (alive[q]) kept_state[alive_map[q]] = (int32_t)q;
    }
    PyObject *trans_out = PyBytes_FromStringAndSize(NULL, final_count * alphabet * (Py_ssize_t)sizeof(int32_t));
    PyObject *acc_out = PyBytes_FromStringAndSize(NULL, final_count);
    IntBuf calls_out = {0};
    int failed = !trans_out || !acc_out;
    for (Py_ssize_t k = 0; !failed && k < final_count; k++) {
        int32_t q = kept_state[rep[k]];
        int32_t *row = (int32_t *)PyBytes_AS_STRING(trans_out) + k * alphabet;
        memset(row, 0xFF, (size_t)alphabet * sizeof(int32_t));
        for (int32_t g = seg_first[q]; g < seg_first[q + 1]; g++) {
            int32_t t = alive_map[segs[3 * g + 2]];
            if (t < 0) continue;
            int32_t to = order[cls[t]];
            for (int32_t a = segs[3 * g]; a <= segs[3 * g + 1]; a++) row[a] = to;
        }
        PyBytes_AS_STRING(acc_out)[k] = (char)d.accepting.data[q];
    }
    /* calls of each class's first state, in rule order (as recorded) */
    for (Py_ssize_t c = 0; !failed && c < ncalls; c++) {
        const int32_t *call = d.call_out.data + 3 * c;
        if (!alive[call[0]] || alive_map[call[2]] < 0) continue;
        int32_t k = order[cls[alive_map[call[0]]]];
        if (rep[k] != alive_map[call[0]]) continue;
        failed = buf_push(&calls_out, k) || buf_push(&calls_out, call[1]) || buf_push(&calls_out, order[cls[alive_map[call[2]]]]);
    }
    free(rep);
    free(kept_state);
    if (!failed) {
        PyObject *calls_bytes = buf_bytes(&calls_out);
        if (calls_bytes) result = PyTuple_Pack(3, trans_out, acc_out, calls_bytes);
        Py_XDECREF(calls_bytes);
    }
    free(calls_out.data);
    Py_XDECREF(trans_out);
    Py_XDECREF(acc_out);
done:
    for (int i = 0; i < 4; i++) free(scratch[i].data);
    grouped_free(&d.eps);
    grouped_free(&d.edges);
    grouped_free(&d.calls);
    free(d.seen);
    free(d.stack.data);
    free(d.set.data);
    seqmap_free(&d.subsets);
    seqmap_free(&d.closures);
    free(d.segs.data);
    free(d.seg_first.data);
    free(d.accepting.data);
    free(d.call_out.data);
    free(open_count);
    free(alive_map);
    free(stack);
    free(tail);
    free(label);
    free(head);
    free(cls);
    free(order);
    free(rev_lo);
    free(rev);
    free(alive);
    free(acc);
    return result;
}

/* ---------------------------------------------------------------------------------------------
 * A rule body's automaton straight from the grammar IR (`automaton.NFABuilder`, then `dfa_of_nfa`).
 *
 * `set_ir` gives the IR's expression classes (`grammar.ir`: Literal, CharClass, ByteClass, RuleRef,
 * TerminalRef, Sequence, Choice, Repeat) and GrammarError once; `dfa_of_expr` walks an expression
 * (frozen dataclasses with slots, read through their attributes) into a Thompson NFA, character
 * classes split into UTF-8 byte ranges here, and makes its minimal DFA; `expr_digest` is a 128-bit
 * digest of an expression with its rule references read as indices, the key of the automaton
 * cache (a Python hash of a large expression walked it, and an equality check walked it again).
 * Since the minimal DFA's numbering depends only on its language (breadth first from the start,
 * symbols in order, then calls by rule: see `dfa_of_nfa`), it is the one the Python builder makes.
 * ------------------------------------------------------------------------------------------- */

enum { IR_LITERAL, IR_CHARCLASS, IR_BYTECLASS, IR_RULEREF, IR_TERMINALREF, IR_SEQUENCE, IR_CHOICE, IR_REPEAT, IR_KINDS };
enum { A_VALUE, A_RANGES, A_NEGATED, A_NAME, A_ITEMS, A_ALTERNATIVES, A_ITEM, A_MIN, A_MAX, A_COUNT };
static PyObject *ir_types[IR_KINDS];
static PyObject *ir_names[A_COUNT];
static PyObject *grammar_error_class;
#define MAX_CODE_POINT 0x10FFFF
#define MAX_EXPR_DEPTH 100000

static PyObject *set_ir(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *types, *error;
    if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &types, &error)) return NULL;
    if (PyTuple_GET_SIZE(types) != IR_KINDS) return bad("set_ir: the eight IR classes"), NULL;
    static const char *names[A_COUNT] = {"value", "ranges", "negated", "name", "items", "alternatives", "item", "min", "max"};
    for (int k = 0; k < A_COUNT; k++) {
        if (!ir_names[k] && !(ir_names[k] = PyUnicode_InternFromString(names[k]))) return NULL;
    }
    for (int k = 0; k < IR_KINDS; k++) {
        PyObject *t = PyTuple_GET_ITEM(types, k);
        if (!PyType_Check(t)) return bad("set_ir: not a class"), NULL;
        Py_INCREF(t);
        Py_XSETREF(ir_types[k], t);
    }
    Py_INCREF(error);
    Py_XSETREF(grammar_error_class, error);
    Py_RETURN_NONE;
}

static int ir_kind(PyObject *expr) {
    for (int k = 0; k < IR_KINDS; k++) {
        if ((PyObject *)Py_TYPE(expr) == ir_types[k]) return k;
    }
    PyErr_Format(PyExc_TypeError, "not a grammar expression: %R", expr);
    return -1;
}

static int grammar_error(const char *message) {
    PyErr_SetString(grammar_error_class ? grammar_error_class : PyExc_ValueError, message);
    return -1;
}

/* An attribute of an expression that must be a tuple (items, alternatives, ranges). */
static PyObject *tuple_attr(PyObject *expr, int name) {
    PyObject *value = PyObject_GetAttr(expr, ir_names[name]);
    if (value && !PyTuple_Check(value)) {
        Py_DECREF(value);
        PyErr_SetString(PyExc_TypeError, "grammar expression: a tuple expected");
        return NULL;
    }
    return value;
}

/* The ranges of a class as sorted, merged inclusive int pairs (`ir.normalize_ranges`), complemented
 * within [0, top] where `negated`: `*out` (malloc'd) holds `*count` pairs. */
static int class_ranges(PyObject *ranges, int negated, int64_t top, int64_t **out, Py_ssize_t *count) {
    Py_ssize_t n = PyTuple_GET_SIZE(ranges);
    int64_t *pairs = (int64_t *)malloc((size_t)(2 * n + 2) * sizeof(int64_t));
    if (!pairs) return PyErr_NoMemory(), -1;
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(ranges, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            free(pairs);
            PyErr_SetString(PyExc_TypeError, "class ranges: (lo, hi) pairs expected");
            return -1;
        }
        long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0)), hi = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred()) {
            free(pairs);
            return -1;
        }
        if (lo > hi) continue;
        pairs[2 * m] = lo;
        pairs[2 * m + 1] = hi;
        m++;
    }
    /* sort by lo (insertion sort: classes hold few ranges), merge overlapping or adjacent */
    for (Py_ssize_t i = 1; i < m; i++) {
        int64_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
        Py_ssize_t j = i;
        while (j > 0 && (pairs[2 * (j - 1)] > lo || (pairs[2 * (j - 1)] == lo && pairs[2 * (j - 1) + 1] > hi))) {
            pairs[2 * j] = pairs[2 * (j - 1)];
            pairs[2 * j + 1] = pairs[2 * (j - 1) + 1];
            j--;
        }
        pairs[2 * j] = lo;
        pairs[2 * j + 1] = hi;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (k && pairs[2 * i] <= pairs[2 * (k - 1) + 1] + 1) {
            if (pairs[2 * i + 1] > pairs[2 * (k - 1) + 1]) pairs[2 * (k - 1) + 1] = pairs[2 * i + 1];
        } else {
            pairs[2 * k] = pairs[2 * i];
            pairs[2 * k + 1] = pairs[2 * i + 1];
            k++;
        }
    }
    if (negated) {
        int64_t *comp = (int64_t *)malloc((size_t)(2 * k + 2) * sizeof(int64_t));
        if (!comp) {
            free(pairs);
            return PyErr_NoMemory(), -1;
        }
        Py_ssize_t c = 0;
        int64_t next = 0;
        for (Py_ssize_t i = 0; i < k; i++) {
            if (pairs[2 * i] > next) {
                comp[2 * c] = next;
                comp[2 * c + 1] = pairs[2 * i] - 1;
                c++;
            }
            if (pairs[2 * i + 1] + 1 > next) next = pairs[2 * i + 1] + 1;
        }
        if (next <= top) {
            comp[2 * c] = next;
            comp[2 * c + 1] = top;
            c++;
        }
        free(pairs);
        pairs = comp;
        k = c;
    }
    *out = pairs;
    *count = k;
    return 0;
}

typedef struct {
    IntBuf eps, edges, calls;
    int32_t count;
    Py_ssize_t max_states;
    PyObject *rule_index, *terminal_index; /* terminal_index: None outside lexer mode */
    int depth;
} ExprNfa;

/* A new NFA state; -1 with OverflowError past the limit (`automaton._native_dfa` words the refusal). */
static int32_t xn_state(ExprNfa *b) {
    if (b->count >= b->max_states) {
        PyErr_Format(PyExc_OverflowError, "more than %zd automaton states", b->max_states);
        return -1;
    }
    return b->count++;
}

static int xn_eps(ExprNfa *b, int32_t src, int32_t dst) {
    return buf_push(&b->eps, src) || buf_push(&b->eps, dst);
}

static int xn_edge(ExprNfa *b, int32_t src, int32_t lo, int32_t hi, int32_t dst) {
    return buf_push(&b->edges, src) || buf_push(&b->edges, lo) || buf_push(&b->edges, hi) || buf_push(&b->edges, dst);
}

/* A chain of byte ranges lo[k]..hi[k] from `src` to `dst`. */
static int xn_chain(ExprNfa *b, int32_t src, int32_t dst, const int32_t *lo, const int32_t *hi, int n) {
    int32_t cur = src;
    for (int k = 0; k < n; k++) {
        int32_t next = k == n - 1 ? dst : xn_state(b);
        if (next < 0 || xn_edge(b, cur, lo[k], hi[k], next)) return -1;
        cur = next;
    }
    return 0;
}

static int utf8_encode(uint32_t c, int32_t *out) {
    if (c < 0x80) {
        out[0] = (int32_t)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (int32_t)(0xC0 | (c >> 6));
        out[1] = (int32_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (int32_t)(0xE0 | (c >> 12));
        out[1] = (int32_t)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (int32_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (int32_t)(0xF0 | (c >> 18));
    out[1] = (int32_t)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (int32_t)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (int32_t)(0x80 | (c & 0x3F));
    return 4;
}

/* The UTF-8 encodings of the code points lo..hi (no surrogates in it), as chains of byte ranges from
 * `src` to `dst`: the range split until every byte position of it spans a whole range. */
static int xn_utf8(ExprNfa *b, int32_t src, int32_t dst, uint32_t lo, uint32_t hi) {
    static const uint32_t last_of_length[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++) {
        if (lo <= last_of_length[i] && last_of_length[i] < hi) {
            return xn_utf8(b, src, dst, lo, last_of_length[i]) || xn_utf8(b, src, dst, last_of_length[i] + 1, hi);
        }
    }
    if (hi < 0x80) return xn_edge(b, src, (int32_t)lo, (int32_t)hi, dst);
    for (int i = 1; i < 4; i++) {
        uint32_t m = ((uint32_t)1 << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) return xn_utf8(b, src, dst, lo, lo | m) || xn_utf8(b, src, dst, (lo | m) + 1, hi);
            if ((hi & m) != m) return xn_utf8(b, src, dst, lo, (hi & ~m) - 1) || xn_utf8(b, src, dst, hi & ~m, hi);
        }
    }
    int32_t a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    return xn_chain(b, src, dst, a, z, n);
}

static int xn_build(ExprNfa *b, PyObject *expr, int32_t src, int32_t dst);

/* Alternatives that are all byte strings: their minimal acyclic automaton (`automaton.minimal_word_automaton`,
 * Daciuk et al.'s incremental construction over the sorted words: the states of the previous word
 * past its common prefix with the next are merged with an equal registered state or registered,
 * deepest first), put between `src` and `dst`. A chain per alternative made an enum of 35,000
 * values 400,000 states. The words are the bytes objects `words[0..n)`. */
typedef struct {
    const uint8_t *data;
    Py_ssize_t len;
} Word;

static int cmp_word(const void *a, const void *b) {
    const Word *x = (const Word *)a, *y = (const Word *)b;
    Py_ssize_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->data, y->data, (size_t)n) : 0;
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

static int xn_literal_set(ExprNfa *b, PyObject *const *words_in, Py_ssize_t n, int32_t src, int32_t dst) {
    Word *words = (Word *)malloc((size_t)(n ? n : 1) * sizeof(Word));
    IntBuf *out = NULL;     /* per automaton state: its transitions, (byte, target) pairs in byte order */
    IntBuf final = {0}, path = {0}, key = {0}, nfa_of = {0}, todo = {0};
    SeqMap reg = {0};
    Py_ssize_t states = 0, cap = 0;
    int status = -1;
    if (!words) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        words[i].data = (const uint8_t *)PyBytes_AS_STRING(words_in[i]);
        words[i].len = PyBytes_GET_SIZE(words_in[i]);
    }
    qsort(words, (size_t)n, sizeof(Word), cmp_word);
#define NEW_STATE(id)                                                                                 \
    do {                                                                                              \
        if (reserve((void **)&out, &cap, states, sizeof(IntBuf), 64)) goto done;                      \
        out[states] = (IntBuf){0};                                                                    \
        if (buf_push(&final, 0)) goto done;                                                           \
        (id) = (int32_t)states++;                                                                     \
    } while (0)
    int32_t root;
    NEW_STATE(root);
    if (buf_push(&path, root)) goto done;
    const Word *previous = NULL;
    for (Py_ssize_t w = 0; w <= n; w++) {
        if (w < n && previous && !cmp_word(previous, &words[w])) continue; /* (a repeated word) */
        Py_ssize_t common = 0;
        if (w < n && previous) {
            Py_ssize_t limit = words[w].len < previous->len ? words[w].len : previous->len;
            while (common < limit && words[w].data[common] == previous->data[common]) common++;
        }
        /* settle the previous word's states below depth `common` (all of them after the last word) */
        while (path.size - 1 > common) {
            int32_t child = path.data[--path.size], parent = path.data[path.size - 1];
            key.size = 0;
            if (buf_push(&key, final.data[child])) goto done;
            for (Py_ssize_t k = 0; k < out[child].size; k++) {
                if (buf_push(&key, out[child].data[k])) goto done;
            }
            uint64_t h = seq_hash(key.data, key.size);
            int32_t found = seqmap_get(&reg, key.data, key.size, h);
            if (found >= 0) {
                out[parent].data[out[parent].size - 1] = found; /* (the parent's last transition led to child) */
            } else if (seqmap_put(&reg, key.data, key.size, h, child)) {
                goto done;
            }
        }
        if (w == n) break;
        for (Py_ssize_t k = common; k < words[w].len; k++) {
            int32_t next, top = path.data[path.size - 1];
            NEW_STATE(next);
            if (buf_push(&out[top], words[w].data[k]) || buf_push(&out[top], next) || buf_push(&path, next)) goto done;
        }
        final.data[path.data[path.size - 1]] = 1;
        previous = &words[w];
    }
    /* the states reachable from the root, each an NFA state (the root is `src`) */
    if (reserve((void **)&nfa_of.data, &nfa_of.cap, 0, sizeof(int32_t), states)) goto done;
    for (Py_ssize_t q = 0; q < states; q++) nfa_of.data[q] = -1;
    nfa_of.data[root] = src;
    if (buf_push(&todo, root)) goto done;
    while (todo.size) {
        int32_t q = todo.data[--todo.size];
        if (final.data[q] && xn_eps(b, nfa_of.data[q], dst)) goto done;
        for (Py_ssize_t k = 0; k < out[q].size; k += 2) {
            int32_t byte = out[q].data[k], t = out[q].data[k + 1];
            if (nfa_of.data[t] < 0) {
                if ((nfa_of.data[t] = xn_state(b)) < 0 || buf_push(&todo, t)) goto done;
            }
            if (xn_edge(b, nfa_of.data[q], byte, byte, nfa_of.data[t])) goto done;
        }
    }
    status = 0;
#undef NEW_STATE
done:
    for (Py_ssize_t q = 0; q < states; q++) free(out[q].data);
    free(out);
    free(words);
    free(final.data);
    free(path.data);
    free(key.data);
    free(nfa_of.data);
    free(todo.data);
    seqmap_free(&reg);
    return status;
}

static int xn_charclass(ExprNfa *b, PyObject *expr, int32_t src, int32_t dst) {
    if (b->terminal_index != Py_None) return grammar_error("a character class cannot appear in a parser rule of a lexer-mode grammar");
    PyObject *ranges = tuple_attr(expr, A_RANGES), *negated = ranges ? PyObject_GetAttr(expr, ir_names[A_NEGATED]) : NULL;
    int64_t *pairs = NULL;
    Py_ssize_t count = 0;
    int is_negated = negated ? PyObject_IsTrue(negated) : -1;
    int status = is_negated < 0 ? -1 : class_ranges(ranges, is_negated, MAX_CODE_POINT, &pairs, &count);
    for (Py_ssize_t i = 0; !status && i < count; i++) {
        int64_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
        if (lo < 0 || hi > MAX_CODE_POINT) {
            status = bad("character class: a code point out of range");
            break;
        }
        if (lo < 0xD800) status = xn_utf8(b, src, dst, (uint32_t)lo, (uint32_t)(hi < 0xD7FF ? hi : 0xD7FF));
        if (!status && hi > 0xDFFF) status = xn_utf8(b, src, dst, (uint32_t)(lo > 0xE000 ? lo : 0xE000), (uint32_t)hi);
    }
    free(pairs);
    Py_XDECREF(ranges);
    Py_XDECREF(negated);
    return status;
}

static int xn_byteclass(ExprNfa *b, PyObject *expr, int32_t src, int32_t dst) {
    if (b->terminal_index != Py_None) return grammar_error("a byte class cannot appear in a parser rule of a lexer-mode grammar");
    PyObject *ranges = tuple_attr(expr, A_RANGES);
    int64_t *pairs = NULL;
    Py_ssize_t count = 0;
    int status = ranges ? class_ranges(ranges, 0, 255, &pairs, &count) : -1;
    for (Py_ssize_t i = 0; !status && i < count; i++) {
        if (pairs[2 * i] < 0 || pairs[2 * i + 1] > 255) {
            status = bad("byte class: a byte out of range");
            break;
        }
        status = xn_edge(b, src, (int32_t)pairs[2 * i], (int32_t)pairs[2 * i + 1], dst);
    }
    free(pairs);
    Py_XDECREF(ranges);
    return status;
}

static int xn_ref(ExprNfa *b, PyObject *expr, int kind, int32_t src, int32_t dst) {
    PyObject *name = PyObject_GetAttr(expr, ir_names[A_NAME]);
    if (!name) return -1;
    int status = -1;
    if (kind == IR_TERMINALREF && b->terminal_index == Py_None) {
        PyErr_Format(grammar_error_class, "terminal %R used in a grammar without a lexer", name);
    } else {
        PyObject *index = PyObject_GetItem(kind == IR_RULEREF ? b->rule_index : b->terminal_index, name);
        long value = index ? PyLong_AsLong(index) : -1;
        Py_XDECREF(index);
        if (!PyErr_Occurred()) {
            if (value < 0 || value > INT32_MAX) {
                bad("rule or terminal index out of range");
            } else if (kind == IR_RULEREF) {
                status = buf_push(&b->calls, src) || buf_push(&b->calls, (int32_t)value) || buf_push(&b->calls, dst);
            } else {
                status = xn_edge(b, src, (int32_t)value, (int32_t)value, dst);
            }
        }
    }
    Py_DECREF(name);
    return status;
}

static int xn_repeat(ExprNfa *b, PyObject *expr, int32_t src, int32_t dst) {
    PyObject *item = PyObject_GetAttr(expr, ir_names[A_ITEM]);
    PyObject *min_obj = item ? PyObject_GetAttr(expr, ir_names[A_MIN]) : NULL;
    PyObject *max_obj = min_obj ? PyObject_GetAttr(expr, ir_names[A_MAX]) : NULL;
    int status = -1;
    if (!max_obj) goto done;
    long min = PyLong_AsLong(min_obj), max = max_obj == Py_None ? -1 : PyLong_AsLong(max_obj);
    if (PyErr_Occurred()) goto done;
    if (max_obj != Py_None && max < min) {
        PyErr_Format(grammar_error_class, "repetition {%ld,%ld} has max < min", min, max);
        goto done;
    }
    int32_t cur = src;
    for (long k = 0; k < min; k++) {
        int32_t next = xn_state(b);
        if (next < 0 || xn_build(b, item, cur, next)) goto done;
        cur = next;
    }
    if (max_obj == Py_None) {
        int32_t loop = xn_state(b), body_end = loop < 0 ? -1 : xn_state(b);
        if (body_end < 0 || xn_eps(b, cur, loop) || xn_eps(b, body_end, loop) || xn_eps(b, loop, dst) ||
            xn_build(b, item, loop, body_end))
            goto done;
    } else {
        if (xn_eps(b, cur, dst)) goto done;
        for (long k = 0; k < max - min; k++) {
            int32_t next = xn_state(b);
            if (next < 0 || xn_build(b, item, cur, next) || xn_eps(b, next, dst)) goto done;
            cur = next;
        }
    }
    status = 0;
done:
    Py_XDECREF(item);
    Py_XDECREF(min_obj);
    Py_XDECREF(max_obj);
    return status;
}

/* `NFABuilder.build`: the NFA of `expr` between states `src` and `dst`. */
static int xn_build(ExprNfa *b, PyObject *expr, int32_t src, int32_t dst) {
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (++b->depth > MAX_EXPR_DEPTH) {
        b->depth--;
        return grammar_error("grammar expression nested too deeply");
    }
    int status = -1;
    if (kind == IR_LITERAL) {
        PyObject *value = PyObject_GetAttr(expr, ir_names[A_VALUE]);
        if (value && PyBytes_Check(value)) {
            Py_ssize_t n = PyBytes_GET_SIZE(value);
            const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(value);
            status = n ? 0 : xn_eps(b, src, dst);
            for (Py_ssize_t k = 0, cur = src; !status && k < n; k++) {
                int32_t next = k == n - 1 ? dst : xn_state(b);
                status = next < 0 || xn_edge(b, (int32_t)cur, data[k], data[k], next);
                cur = next;
            }
            if (status > 0) status = -1;
        } else if (value) {
            PyErr_SetString(PyExc_TypeError, "a literal's value must be bytes");
        }
        Py_XDECREF(value);
    } else if (kind == IR_CHARCLASS) {
        status = xn_charclass(b, expr, src, dst);
    } else if (kind == IR_BYTECLASS) {
        status = xn_byteclass(b, expr, src, dst);
    } else if (kind == IR_RULEREF || kind == IR_TERMINALREF) {
        status = xn_ref(b, expr, kind, src, dst);
    } else if (kind == IR_SEQUENCE) {
        PyObject *items = tuple_attr(expr, A_ITEMS);
        if (items) {
            Py_ssize_t n = PyTuple_GET_SIZE(items);
            status = n ? 0 : xn_eps(b, src, dst);
            int32_t cur = src;
            for (Py_ssize_t k = 0; !status && k < n; k++) {
                int32_t next = k == n - 1 ? dst : xn_state(b);
                status = next < 0 ? -1 : xn_build(b, PyTuple_GET_ITEM(items, k), cur, next);
                cur = next;
            }
            Py_DECREF(items);
        }
    } else if (kind == IR_CHOICE) {
        PyObject *alternatives = tuple_attr(expr, A_ALTERNATIVES);
        if (alternatives) {
            /* literal alternatives together as one word automaton (outside lexer mode, as in Python) */
            Py_ssize_t n = PyTuple_GET_SIZE(alternatives), literals = 0;
            PyObject **words = (PyObject **)malloc((size_t)(n ? n : 1) * sizeof(PyObject *));
            status = words ? 0 : (PyErr_NoMemory(), -1);
            for (Py_ssize_t k = 0; !status && b->terminal_index == Py_None && k < n; k++) {
                PyObject *alt = PyTuple_GET_ITEM(alternatives, k);
                if ((PyObject *)Py_TYPE(alt) != ir_types[IR_LITERAL]) continue;
                PyObject *value = PyObject_GetAttr(alt, ir_names[A_VALUE]);
                if (!value || !PyBytes_Check(value)) {
                    if (value) PyErr_SetString(PyExc_TypeError, "a literal's value must be bytes");
                    Py_XDECREF(value);
                    status = -1;
                    break;
                }
                words[literals++] = value;
            }
            int grouped = literals > 1;
            if (!status && grouped) status = xn_literal_set(b, words, literals, src, dst);
            for (Py_ssize_t k = 0; k < literals; k++) Py_DECREF(words[k]);
            free(words);
            for (Py_ssize_t k = 0; !status && k < n; k++) {
                PyObject *alt = PyTuple_GET_ITEM(alternatives, k);
                if (grouped && (PyObject *)Py_TYPE(alt) == ir_types[IR_LITERAL]) continue;
                status = xn_build(b, alt, src, dst);
            }
            Py_DECREF(alternatives);
        }
    } else {
        status = xn_repeat(b, expr, src, dst);
    }
    b->depth--;
    return status;
}

/* dfa_of_expr(expr, rule_index, terminal_index, alphabet, max_nfa_states, max_dfa_states) -> (trans, accepting,
 * calls): `dfa_of_nfa` of the Thompson NFA of `expr` (rule references read in `rule_index`, terminal
 * references in `terminal_index`, a dict in lexer mode and None otherwise). */
static PyObject *dfa_of_expr(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr;
    Py_ssize_t alphabet, max_dfa;
    ExprNfa b;
    memset(&b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OO!Onnn", &expr, &PyDict_Type, &b.rule_index, &b.terminal_index, &alphabet,
                          &b.max_states, &max_dfa))
        return NULL;
    if (!ir_types[0]) return bad("dfa_of_expr: set_ir was not called"), NULL;
    if (b.terminal_index != Py_None && !PyDict_Check(b.terminal_index)) {
        PyErr_SetString(PyExc_TypeError, "terminal_index: a dict or None");
        return NULL;
    }
    PyObject *result = NULL;
    int32_t start = xn_state(&b), final = start < 0 ? -1 : xn_state(&b);
    if (final >= 0 && !xn_build(&b, expr, start, final)) {
        result = dfa_of_nfa(b.count, start, final, b.eps.data, b.eps.size / 2, b.edges.data, b.edges.size / 4,
                            b.calls.data, b.calls.size / 3, alphabet, max_dfa);
    }
    free(b.eps.data);
    free(b.edges.data);
    free(b.calls.data);
    return result;
}

/* expr_text(expr) -> str: `grammar.ir.to_text` of an expression (the canonical text that keys the compile
 * cache), written in one buffer: the Python function made a string and a join per node. */
typedef struct {
    char *data;
    Py_ssize_t size, cap;
} CharBuf;

static int cb_put(CharBuf *b, const char *s, Py_ssize_t n) {
    if (b->size + n > b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 256;
        while (cap < b->size + n) cap *= 2;
        char *grown = (char *)realloc(b->data, (size_t)cap);
        if (!grown) return PyErr_NoMemory(), -1;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->size, s, (size_t)n);
    b->size += n;
    return 0;
}

static int cb_str(CharBuf *b, const char *s) {
    return cb_put(b, s, (Py_ssize_t)strlen(s));
}

static int cb_obj(CharBuf *b, PyObject *text) {
    Py_ssize_t n;
    const char *utf8 = text ? PyUnicode_AsUTF8AndSize(text, &n) : NULL;
    return utf8 ? cb_put(b, utf8, n) : -1;
}

static int text_ranges(CharBuf *b, PyObject *ranges) {
    char item[64];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ranges); i++) {
        PyObject *pair = PyTuple_GET_ITEM(ranges, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "class ranges: (lo, hi) pairs expected");
            return -1;
        }
        long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0)), hi = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred()) return -1;
        if (lo < 0 || hi < 0) return bad("class ranges: negative code points"), -1;
        snprintf(item, sizeof(item), "%llx-%llx,", lo, hi);
        if (cb_str(b, item)) return -1;
    }
    return 0;
}

static int text_expr(CharBuf *b, PyObject *expr, int depth) {
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int status = -1;
    if (kind == IR_LITERAL) {
        PyObject *value = PyObject_GetAttr(expr, ir_names[A_VALUE]);
        PyObject *repr = value ? PyObject_Repr(value) : NULL;
        status = cb_obj(b, repr);
        Py_XDECREF(repr);
        Py_XDECREF(value);
    } else if (kind == IR_CHARCLASS || kind == IR_BYTECLASS) {
        PyObject *ranges = tuple_attr(expr, A_RANGES);
        int negated = 0;
        if (ranges && kind == IR_CHARCLASS) {
            PyObject *flag = PyObject_GetAttr(expr, ir_names[A_NEGATED]);
            negated = flag ? PyObject_IsTrue(flag) : -1;
            Py_XDECREF(flag);
        }
        status = !ranges || negated < 0 || cb_str(b, kind == IR_BYTECLASS ? "b[" : negated ? "[^" : "[") ||
                         text_ranges(b, ranges) || cb_str(b, "]") ? -1 : 0;
        Py_XDECREF(ranges);
    } else if (kind == IR_RULEREF || kind == IR_TERMINALREF) {
        PyObject *name = PyObject_GetAttr(expr, ir_names[A_NAME]);
        status = !name || (kind == IR_TERMINALREF && cb_str(b, "%")) || cb_obj(b, name) ? -1 : 0;
        Py_XDECREF(name);
    } else if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        status = parts ? cb_str(b, "(") : -1;
        for (Py_ssize_t k = 0; !status && parts && k < PyTuple_GET_SIZE(parts); k++) {
            if (k && cb_str(b, kind == IR_SEQUENCE ? " " : " | ")) status = -1;
            if (!status) status = text_expr(b, PyTuple_GET_ITEM(parts, k), depth + 1);
        }
        if (!status) status = cb_str(b, ")");
        Py_XDECREF(parts);
    } else {
        PyObject *item = PyObject_GetAttr(expr, ir_names[A_ITEM]);
        PyObject *min_obj = item ? PyObject_GetAttr(expr, ir_names[A_MIN]) : NULL;
        PyObject *max_obj = min_obj ? PyObject_GetAttr(expr, ir_names[A_MAX]) : NULL;
        if (max_obj) {
            long long min = PyLong_AsLongLong(min_obj), max = max_obj == Py_None ? 0 : PyLong_AsLongLong(max_obj);
            char bounds[64];
            if (max_obj == Py_None) {
                snprintf(bounds, sizeof(bounds), "{%lld,}", min);
            } else {
                snprintf(bounds, sizeof(bounds), "{%lld,%lld}", min, max);
            }
            status = PyErr_Occurred() || text_expr(b, item, depth + 1) || cb_str(b, bounds) ? -1 : 0;
        }
        Py_XDECREF(item);
        Py_XDECREF(min_obj);
        Py_XDECREF(max_obj);
    }
    return status;
}

static PyObject *expr_text(PyObject *self, PyObject *expr) {
    (void)self;
    if (!ir_types[0]) return bad("expr_text: set_ir was not called"), NULL;
    CharBuf b = {0};
    PyObject *result = NULL;
    if (!text_expr(&b, expr, 0)) result = PyUnicode_DecodeUTF8(b.data ? b.data : "", b.size, "strict");
    free(b.data);
    return result;
}

/* A 128-bit digest, two 64-bit lanes mixed word by word. */
typedef struct {
    uint64_t a, b;
} Digest;

static void dg_word(Digest *h, uint64_t w) {
    h->a = (h->a ^ w) * 0x9E3779B97F4A7C15ull;
    h->a ^= h->a >> 29;
    h->b = (h->b + w) * 0xC2B2AE3D27D4EB4Full;
    h->b ^= h->b >> 31;
}

static int dg_expr(Digest *h, PyObject *expr, PyObject *rule_index, int depth) {
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    dg_word(h, 0xD1B54A32D192ED03ull + (uint64_t)kind);
    int status = 0;
    if (kind == IR_LITERAL) {
        PyObject *value = PyObject_GetAttr(expr, ir_names[A_VALUE]);
        if (!value || !PyBytes_Check(value)) {
            if (value) PyErr_SetString(PyExc_TypeError, "a literal's value must be bytes");
            Py_XDECREF(value);
            return -1;
        }
        Py_ssize_t n = PyBytes_GET_SIZE(value);
        const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(value);
        dg_word(h, (uint64_t)n);
        for (Py_ssize_t k = 0; k < n; k += 8) {
            uint64_t w = 0;
            memcpy(&w, data + k, (size_t)(n - k < 8 ? n - k : 8));
            dg_word(h, w);
        }
        Py_DECREF(value);
    } else if (kind == IR_CHARCLASS || kind == IR_BYTECLASS) {
        PyObject *ranges = tuple_attr(expr, A_RANGES);
        if (!ranges) return -1;
        int negated = 0;
        if (kind == IR_CHARCLASS) {
            PyObject *flag = PyObject_GetAttr(expr, ir_names[A_NEGATED]);
            negated = flag ? PyObject_IsTrue(flag) : -1;
            Py_XDECREF(flag);
        }
        int64_t *pairs = NULL;
        Py_ssize_t count = 0;
        status = negated < 0 ? -1 : class_ranges(ranges, negated, kind == IR_CHARCLASS ? MAX_CODE_POINT : 255, &pairs, &count);
        dg_word(h, (uint64_t)count);
        for (Py_ssize_t i = 0; !status && i < 2 * count; i++) dg_word(h, (uint64_t)pairs[i]);
        free(pairs);
        Py_DECREF(ranges);
    } else if (kind == IR_RULEREF || kind == IR_TERMINALREF) {
        PyObject *name = PyObject_GetAttr(expr, ir_names[A_NAME]);
        if (!name) return -1;
        PyObject *index = kind == IR_RULEREF ? PyDict_GetItemWithError(rule_index, name) : NULL;
        long value = index ? PyLong_AsLong(index) : -1;
        if (kind == IR_TERMINALREF) {
            Py_hash_t hash = PyObject_Hash(name);
            value = hash == -1 ? -1 : (long)hash;
        }
        dg_word(h, (uint64_t)value);
        Py_DECREF(name);
        if (PyErr_Occurred()) return -1;
    } else if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        if (!parts) return -1;
        dg_word(h, (uint64_t)PyTuple_GET_SIZE(parts));
        for (Py_ssize_t k = 0; !status && k < PyTuple_GET_SIZE(parts); k++) {
            status = dg_expr(h, PyTuple_GET_ITEM(parts, k), rule_index, depth + 1);
        }
        Py_DECREF(parts);
    } else {
        PyObject *item = PyObject_GetAttr(expr, ir_names[A_ITEM]);
        PyObject *min_obj = item ? PyObject_GetAttr(expr, ir_names[A_MIN]) : NULL;
        PyObject *max_obj = min_obj ? PyObject_GetAttr(expr, ir_names[A_MAX]) : NULL;
        if (max_obj) {
            long long min = PyLong_AsLongLong(min_obj), max = max_obj == Py_None ? -1 : PyLong_AsLongLong(max_obj);
            dg_word(h, (uint64_t)min);
            dg_word(h, (uint64_t)max);
            status = PyErr_Occurred() ? -1 : dg_expr(h, item, rule_index, depth + 1);
        } else {
            status = -1;
        }
        Py_XDECREF(item);
        Py_XDECREF(min_obj);
        Py_XDECREF(max_obj);
    }
    return status;
}

/* expr_digest(expr, rule_index) -> 16 bytes: the automaton cache's key of `expr`, its rule references
 * read as their indices in `rule_index` (-1 where absent). */
static PyObject *expr_digest(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr, *rule_index;
    if (!PyArg_ParseTuple(args, "OO!", &expr, &PyDict_Type, &rule_index)) return NULL;
    if (!ir_types[0]) return bad("expr_digest: set_ir was not called"), NULL;
    Digest h = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull};
    if (dg_expr(&h, expr, rule_index, 0)) return NULL;
    uint64_t out[2] = {h.a ^ (h.b >> 17), h.b ^ (h.a << 13)};
    return PyBytes_FromStringAndSize((const char *)out, sizeof(out));
}

/* ---------------------------------------------------------------------------------------------
 * The bytes that may follow each rule (`automaton.RTN.follow_bytes`).
 *
 * follow_bytes(trans, accepting, call_lo, callee, ret, rule_start, state_rule, rules) -> bytes: per rule,
 * 256 bytes of 0/1. First the symbols each state's frame can take before it ends and whether it can
 * end without one (`RTN.call_first_sets`: a worklist over the states that make calls), then per
 * callee what its return states take first, and where a return state may end its frame, what
 * follows the calling rule (a worklist over the rules). What the Python worklists did in tens of
 * milliseconds for a grammar of ten thousand calls, at a large schema's first mask.
 * ------------------------------------------------------------------------------------------- */

static PyObject *follow_bytes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer v[7];
    Py_ssize_t rules;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*n", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &rules)) return NULL;
    PyObject *result = NULL;
    uint64_t *first = NULL, *follow = NULL;
    uint8_t *nullable = NULL, *queued = NULL;
    int32_t *users_lo = NULL, *users = NULL, *todo = NULL, *pass_lo = NULL, *pass = NULL, *owner_of = NULL;
    Py_ssize_t states = v[1].len, calls = v[3].len / (Py_ssize_t)sizeof(int32_t);
    if (need(&v[0], sizeof(int32_t), states * 256, "trans") || need(&v[2], sizeof(int64_t), states + 1, "call_lo") ||
        need(&v[3], sizeof(int32_t), calls, "callee") || need(&v[4], sizeof(int32_t), calls, "ret") ||
        need(&v[5], sizeof(int32_t), rules, "rule_start") || need(&v[6], sizeof(int32_t), states, "state_rule"))
        goto done;
    const int32_t *trans = v[0].buf, *callee = v[3].buf, *ret = v[4].buf, *rule_start = v[5].buf, *state_rule = v[6].buf;
    const uint8_t *accepting = v[1].buf;
    const int64_t *call_lo = v[2].buf;
    if (call_lo[0] != 0 || call_lo[states] != calls) {
        bad("call_lo: not the bounds of the calls");
        goto done;
    }
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (callee[k] < 0 || callee[k] >= rules || ret[k] < 0 || ret[k] >= states) {
            bad("a call to a rule or a return to a state out of range");
            goto done;
        }
    }
    for (Py_ssize_t r = 0; r < rules; r++) {
        if (rule_start[r] < 0 || rule_start[r] >= states) {
            bad("rule_start: a state out of range");
            goto done;
        }
    }
    for (Py_ssize_t q = 0; q < states; q++) {
        if (state_rule[q] < 0 || state_rule[q] >= rules || call_lo[q] > call_lo[q + 1]) {
            bad("state_rule or call_lo out of range");
            goto done;
        }
    }
    first = (uint64_t *)calloc((size_t)states * 4, sizeof(uint64_t));
    nullable = (uint8_t *)malloc((size_t)(states ? states : 1));
    queued = (uint8_t *)calloc((size_t)(states > rules ? states : rules) + 1, 1);
    users_lo = (int32_t *)calloc((size_t)states + 1, sizeof(int32_t));
    users = (int32_t *)malloc((size_t)(2 * calls + 1) * sizeof(int32_t));
    todo = (int32_t *)malloc((size_t)(states > rules ? states : rules) * sizeof(int32_t) + sizeof(int32_t));
    follow = (uint64_t *)calloc((size_t)rules * 4 + 1, sizeof(uint64_t));
    pass_lo = (int32_t *)calloc((size_t)rules + 1, sizeof(int32_t));
    pass = (int32_t *)malloc((size_t)(calls + 1) * sizeof(int32_t));
    owner_of = (int32_t *)malloc((size_t)(calls + 1) * sizeof(int32_t));
    if (!first || !nullable || !queued || !users_lo || !users || !todo || !follow || !pass_lo || !pass || !owner_of) {
        PyErr_NoMemory();
        goto done;
    }
    /* only the states that make calls, start a called rule or are returned to are read: their rows
     * alone are scanned (a large schema's table has ten times more states) */
    for (Py_ssize_t q = 0; q < states; q++) {
        for (int64_t k = call_lo[q]; k < call_lo[q + 1]; k++) {
            queued[q] = queued[rule_start[callee[k]]] = queued[ret[k]] = 1;
        }
    }
    for (Py_ssize_t q = 0; q < states; q++) {
        nullable[q] = accepting[q] != 0;
        if (!queued[q]) continue;
        queued[q] = 0;
        const int32_t *row = trans + q * 256;
        for (int b = 0; b < 256; b++) {
            if (row[b] >= 0) first[4 * q + (b >> 6)] |= (uint64_t)1 << (b & 63);
        }
    }
    /* who depends on whom: a state that calls depends on the callee's start and the return state */
    for (Py_ssize_t q = 0; q < states; q++) {
        for (int64_t k = call_lo[q]; k < call_lo[q + 1]; k++) {
            users_lo[rule_start[callee[k]] + 1]++;
            users_lo[ret[k] + 1]++;
        }
    }
    for (Py_ssize_t q = 0; q < states; q++) users_lo[q + 1] += users_lo[q];
    int32_t *fill = (int32_t *)malloc((size_t)(states ? states : 1) * sizeof(int32_t));
    if (!fill) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(fill, users_lo, (size_t)states * sizeof(int32_t));
    for (Py_ssize_t q = 0; q < states; q++) {
        for (int64_t k = call_lo[q]; k < call_lo[q + 1]; k++) {
            users[fill[rule_start[callee[k]]]++] = (int32_t)q;
            users[fill[ret[k]]++] = (int32_t)q;
        }
    }
    free(fill);
    Py_ssize_t top = 0;
    for (Py_ssize_t q = 0; q < states; q++) {
        if (call_lo[q + 1] > call_lo[q]) {
            todo[top++] = (int32_t)q;
            queued[q] = 1;
        }
    }
    while (top) {
        int32_t q = todo[--top];
        queued[q] = 0;
        uint64_t bits[4] = {first[4 * q], first[4 * q + 1], first[4 * q + 2], first[4 * q + 3]};
        uint8_t ends = nullable[q];
        for (int64_t k = call_lo[q]; k < call_lo[q + 1]; k++) {
            int32_t s = rule_start[callee[k]], r = ret[k];
            for (int j = 0; j < 4; j++) bits[j] |= first[4 * s + j];
            if (nullable[s]) {
                for (int j = 0; j < 4; j++) bits[j] |= first[4 * r + j];
                ends = ends || nullable[r];
            }
        }
        if (memcmp(bits, first + 4 * q, sizeof(bits)) || ends != nullable[q]) {
            memcpy(first + 4 * q, bits, sizeof(bits));
            nullable[q] = ends;
            for (int32_t u = users_lo[q]; u < users_lo[q + 1]; u++) {
                if (!queued[users[u]]) {
                    queued[users[u]] = 1;
                    todo[top++] = users[u];
                }
            }
        }
    }
    /* follow: a callee is followed by its return state's first symbols, and, where that state may
     * end its frame, by what follows the calling rule */
    Py_ssize_t npass = 0;
    for (Py_ssize_t q = 0; q < states; q++) {
        for (int64_t k = call_lo[q]; k < call_lo[q + 1]; k++) {
            int32_t c = callee[k], r = ret[k];
            for (int j = 0; j < 4; j++) follow[4 * c + j] |= first[4 * r + j];
            if (nullable[r]) {
                owner_of[npass] = state_rule[q];
                pass[npass++] = c;
                pass_lo[state_rule[q] + 1]++;
            }
        }
    }
    /* the passes grouped by calling rule (a counting sort of the (owner, callee) pairs) */
    for (Py_ssize_t r = 0; r < rules; r++) pass_lo[r + 1] += pass_lo[r];
    int32_t *by_owner = (int32_t *)malloc((size_t)(npass + 1) * sizeof(int32_t));
    int32_t *at = (int32_t *)malloc((size_t)(rules + 1) * sizeof(int32_t));
    if (!by_owner || !at) {
        free(by_owner);
        free(at);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(at, pass_lo, (size_t)rules * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < npass; k++) by_owner[at[owner_of[k]]++] = pass[k];
    free(at);
    memset(queued, 0, (size_t)rules);
    top = 0;
    for (Py_ssize_t r = 0; r < rules; r++) {
        if (pass_lo[r + 1] > pass_lo[r]) {
            todo[top++] = (int32_t)r;
            queued[r] = 1;
        }
    }
    while (top) {
        int32_t r = todo[--top];
        queued[r] = 0;
        for (int32_t k = pass_lo[r]; k < pass_lo[r + 1]; k++) {
            int32_t c = by_owner[k];
            int grew = 0;
            for (int j = 0; j < 4; j++) {
                uint64_t now = follow[4 * c + j] | follow[4 * r + j];
                grew |= now != follow[4 * c + j];
                follow[4 * c + j] = now;
            }
            if (grew && !queued[c] && pass_lo[c + 1] > pass_lo[c]) {
                queued[c] = 1;
                todo[top++] = c;
            }
        }
    }
    free(by_owner);
    result = PyBytes_FromStringAndSize(NULL, rules * 256);
    if (result) {
        uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
        for (Py_ssize_t r = 0; r < rules; r++) {
            for (int b = 0; b < 256; b++) out[r * 256 + b] = (uint8_t)(follow[4 * r + (b >> 6)] >> (b & 63) & 1);
        }
    }
done:
    for (int i = 0; i < 7; i++) PyBuffer_Release(&v[i]);
    free(first);
    free(nullable);
    free(queued);
    free(users_lo);
    free(users);
    free(todo);
    free(follow);
    free(pass_lo);
    free(pass);
    free(owner_of);
    return result;
}

/* set_bits_where(words, tokens, offsets, ok, group): set in the uint32 row `words` the bits of the
 * tokens of every residual r with ok[r] (a mask's uncertain tokens whose residual the parser
 * accepts): residual r's tokens are tokens[offsets[r]:offsets[r + 1]] (int32 bytes). `group`, the
 * packed bits of all the tokens (or empty), lets a mostly accepted group be set as a whole, less
 * the tokens of the residuals refused: the large groups are 40,000 tokens or more, nearly all
 * accepted or nearly all refused, and a bit per token was ~2 ns each. */
static PyObject *set_bits_where(PyObject *self, PyObject *args) {
    Py_buffer words, ok;
    PyObject *tokens, *offsets, *group;
    if (!PyArg_ParseTuple(args, "w*SSy*S", &words, &tokens, &offsets, &ok, &group)) return NULL;
    PyObject *result = NULL;
    uint32_t *scratch = NULL;
    Py_ssize_t nwords = words.len / (Py_ssize_t)sizeof(uint32_t), residuals = ok.len;
    Py_ssize_t count = PyBytes_GET_SIZE(tokens) / (Py_ssize_t)sizeof(int32_t);
    const int32_t *tok = (const int32_t *)PyBytes_AS_STRING(tokens), *off = (const int32_t *)PyBytes_AS_STRING(offsets);
    const uint8_t *good = (const uint8_t *)ok.buf;
    if (need(&words, sizeof(uint32_t), nwords, "words") ||
        PyBytes_GET_SIZE(offsets) != (residuals + 1) * (Py_ssize_t)sizeof(int32_t) ||
        PyBytes_GET_SIZE(tokens) % (Py_ssize_t)sizeof(int32_t) ||
        (PyBytes_GET_SIZE(group) && PyBytes_GET_SIZE(group) != words.len)) {
        if (!PyErr_Occurred()) bad("set_bits_where: tokens, offsets, ok and group do not fit together");
        goto done;
    }
    Py_ssize_t accepted = 0;
    uint8_t seen = 0;
    for (Py_ssize_t r = 0; r < residuals; r++) {
        accepted += good[r];
        seen |= good[r];
    }
    if (seen > 1) {
        bad("set_bits_where: ok must be 0/1 bytes");
        goto done;
    }
    int whole = PyBytes_GET_SIZE(group) && 2 * accepted >= residuals; /* all, less the refused */
    uint32_t *out = (uint32_t *)words.buf;
    if (whole) {
        if (!(scratch = (uint32_t *)malloc((size_t)words.len))) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(scratch, PyBytes_AS_STRING(group), (size_t)words.len);
    }
    /* whole: the refused residuals' tokens; else the accepted (memchr skips the others when they are few) */
    uint8_t target = whole ? 0 : 1;
    int sparse = 8 * (whole ? residuals - accepted : accepted) < residuals;
    for (Py_ssize_t r = 0; r < residuals; r++) {
        if (sparse) {
            const uint8_t *at = (const uint8_t *)memchr(good + r, target, (size_t)(residuals - r));
            if (!at) break;
            r = at - good;
        } else if (good[r] != target) {
            continue;
        }
        if (off[r] < 0 || off[r] > off[r + 1] || off[r + 1] > count) {
            index_error("residual offsets out of range");
            goto done;
        }
        for (int32_t j = off[r]; j < off[r + 1]; j++) {
            int32_t t = tok[j];
            if (t < 0 || t / 32 >= nwords) {
                index_error("token out of range");
                goto done;
            }
            if (whole) {
                scratch[t >> 5] &= ~((uint32_t)1 << (t & 31));
            } else {
                out[t >> 5] |= (uint32_t)1 << (t & 31);
            }
        }
    }
    for (Py_ssize_t w = 0; whole && w < nwords; w++) out[w] |= scratch[w];
    result = Py_None;
    Py_INCREF(result);
done:
    free(scratch);
    PyBuffer_Release(&words);
    PyBuffer_Release(&ok);
    return result;
}

/* distinct(slots, numbers) -> (keys, chosen, group): `np.unique(numbers)` with an index and the
 * inverse, through the scratch table `slots` (int32, one entry per possible number: the numbers
 * are dense suffix numbers, `lexer_masks.ResidualSets._distinct`): the sorted distinct numbers
 * (int64 bytes), the position of one occurrence of each (int32 bytes) and which one each number
 * is (int64 bytes). A residual set's interning made ten numpy calls of it, most on a few dozen
 * numbers. */
static PyObject *distinct(PyObject *self, PyObject *args) {
    Py_buffer slots_view, numbers_view;
    if (!PyArg_ParseTuple(args, "w*y*", &slots_view, &numbers_view)) return NULL;
    PyObject *result = NULL, *keys_out = NULL, *chosen_out = NULL, *group_out = NULL;
    Py_ssize_t n = numbers_view.len / (Py_ssize_t)sizeof(int64_t), size = slots_view.len / (Py_ssize_t)sizeof(int32_t);
    int32_t *slots = (int32_t *)slots_view.buf;
    const int64_t *numbers = (const int64_t *)numbers_view.buf;
    if (need(&numbers_view, sizeof(int64_t), n, "numbers") || need(&slots_view, sizeof(int32_t), size, "slots")) goto done;
    if (n > INT32_MAX) {
        bad("too many numbers");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (numbers[i] < 0 || numbers[i] >= size) {
            index_error("number out of the slots");
            goto done;
        }
        slots[numbers[i]] = (int32_t)i; /* where a number repeats, one of its positions is left */
    }
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) count += slots[numbers[i]] == i;
    keys_out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int64_t));
    chosen_out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(int32_t));
    group_out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    if (!keys_out || !chosen_out || !group_out) goto done;
    int64_t *keys = (int64_t *)PyBytes_AS_STRING(keys_out), *group = (int64_t *)PyBytes_AS_STRING(group_out);
    int32_t *chosen = (int32_t *)PyBytes_AS_STRING(chosen_out);
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (slots[numbers[i]] == i) keys[k++] = numbers[i];
    }
    qsort(keys, (size_t)count, sizeof(int64_t), cmp_int64);
    for (Py_ssize_t j = 0; j < count; j++) {
        chosen[j] = slots[keys[j]];
        slots[keys[j]] = (int32_t)j;
    }
    for (Py_ssize_t i = 0; i < n; i++) group[i] = slots[numbers[i]];
    result = PyTuple_Pack(3, keys_out, chosen_out, group_out);
done:
    Py_XDECREF(keys_out);
    Py_XDECREF(chosen_out);
    Py_XDECREF(group_out);
    PyBuffer_Release(&slots_view);
    PyBuffer_Release(&numbers_view);
    return result;
}

/* pack_rows(words, order, lo, hi): set in the uint32 row `words` the bit of token order[row] for
 * every trie row in each range lo[i]:hi[i] (int64): a lexer state's accepted and failing tokens, as
 * `mask_cache.pack_ids` of `TokenTrie.token_ids` of the rows, without a bool array of the
 * vocabulary (a third of a classification's time besides the C scan went to those, ad hoc). */
static PyObject *pack_rows(PyObject *self, PyObject *args) {
    Py_buffer words, order, lo, hi;
    if (!PyArg_ParseTuple(args, "w*y*y*y*", &words, &order, &lo, &hi)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t nwords = words.len / (Py_ssize_t)sizeof(uint32_t), rows = order.len / (Py_ssize_t)sizeof(int32_t);
    Py_ssize_t ranges = lo.len / (Py_ssize_t)sizeof(int64_t);
    if (need(&words, sizeof(uint32_t), nwords, "words") || need(&order, sizeof(int32_t), rows, "order") ||
        need(&lo, sizeof(int64_t), ranges, "lo") || need(&hi, sizeof(int64_t), ranges, "hi"))
        goto done;
    if (hi.len != lo.len) {
        bad("lo and hi differ in length");
        goto done;
    }
    uint32_t *out = (uint32_t *)words.buf;
    const int32_t *token = (const int32_t *)order.buf;
    const int64_t *first = (const int64_t *)lo.buf, *last = (const int64_t *)hi.buf;
    for (Py_ssize_t i = 0; i < ranges; i++) {
        if (first[i] < 0 || first[i] > last[i] || last[i] > rows) {
            index_error("row range out of the trie");
            goto done;
        }
        for (int64_t row = first[i]; row < last[i]; row++) {
            int32_t t = token[row];
            if (t < 0 || t / 32 >= nwords) {
                index_error("token out of the row");
                goto done;
            }
            out[t >> 5] |= (uint32_t)1 << (t & 31);
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&words);
    PyBuffer_Release(&order);
    PyBuffer_Release(&lo);
    PyBuffer_Release(&hi);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(table, alphabet, flags, has_stacks, byte, lo, hi, token, child_lo, child_hi, depth, nodes, states, "
     "owners) -> (ok_owner, ok_token, exit_owner, exit_lo, exit_hi, exit_depth, pending_node, pending_state, "
     "pending_owner), each the bytes of an int32 array"},
    {"follow_bytes", follow_bytes, METH_VARARGS,
     "follow_bytes(trans, accepting, call_lo, callee, ret, rule_start, state_rule, rules) -> bytes: per rule, the 256 "
     "bytes (0/1) that may follow it"},
    {"set_ir", set_ir, METH_VARARGS, "set_ir(types, grammar_error): the IR's eight expression classes and GrammarError"},
    {"dfa_of_expr", dfa_of_expr, METH_VARARGS,
     "dfa_of_expr(expr, rule_index, terminal_index, alphabet, max_nfa_states, max_dfa_states) -> (trans, accepting, "
     "calls): the minimal DFA of the Thompson NFA of a grammar expression"},
    {"expr_text", expr_text, METH_O, "expr_text(expr) -> str: grammar.ir.to_text of a grammar expression"},
    {"expr_digest", expr_digest, METH_VARARGS,
     "expr_digest(expr, rule_index) -> bytes: a 128-bit digest of an expression, rule references as indices"},
    {"pack_rows", pack_rows, METH_VARARGS,
     "pack_rows(words, order, lo, hi): words[t >> 5] |= 1 << (t & 31) for t = order[row], every row in lo[i]:hi[i]"},
    {"distinct", distinct, METH_VARARGS,
     "distinct(slots, numbers) -> (keys, chosen, group): np.unique of int64 numbers with an index and the inverse, "
     "through the int32 scratch table slots (int64, int32 and int64 bytes)"},
    {"set_bits_where", set_bits_where, METH_VARARGS,
     "set_bits_where(words, tokens, offsets, ok, group): words[t >> 5] |= 1 << (t & 31) for each t in "
     "tokens[offsets[r]:offsets[r + 1]] with ok[r] (int32 bytes; group: the packed bits of all tokens, or b'')"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native",
                                    "The mask cache's trie walk and the parser's closures in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&InternerType) || PyType_Ready(&PositionWalkerType) || PyType_Ready(&WalkMemoType) || PyType_Ready(&LexerStepperType) || PyType_Ready(&SymbolStepsType) ||
        PyType_Ready(&ResidualWalkerType))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "VERSION", NATIVE_VERSION) ||
        PyModule_AddObjectRef(m, "Interner", (PyObject *)&InternerType) ||
        PyModule_AddObjectRef(m, "PositionWalker", (PyObject *)&PositionWalkerType) ||
        PyModule_AddObjectRef(m, "WalkMemo", (PyObject *)&WalkMemoType) ||
        PyModule_AddObjectRef(m, "LexerStepper", (PyObject *)&LexerStepperType) ||
        PyModule_AddObjectRef(m, "SymbolSteps", (PyObject *)&SymbolStepsType) ||
        PyModule_AddObjectRef(m, "ResidualWalker", (PyObject *)&ResidualWalkerType)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
