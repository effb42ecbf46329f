/* The mask cache's trie walk over a parser's memoised transition table (`walk`, see `_native.c`).
 */
#include "_native.h"

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

/* Consume node `node`'s byte from `state` for `owner`; push the children that go on onto `stack`
 * (triples node, state, owner). */
static int visit(const Trie *trie, const Table *tab, int32_t node, int32_t state, int32_t owner,
                 IntBuf *out, IntBuf *stack) {
    if (node < 0 || node >= trie->count) return cm_bad("trie node out of range");
    if (state < 0 || state >= tab->states) return cm_bad("parser state out of range");
    int32_t next = tab->table[(Py_ssize_t)state * tab->alphabet + trie->byte[node]];
    if (next == UNKNOWN) {
        if (buf_push(&out[PEND_NODE], node) || buf_push(&out[PEND_STATE], state) ||
            buf_push(&out[PEND_OWNER], owner))
            return -1;
        return 0;
    }
    if (next < 0) return 0;
    if (next >= tab->states) return cm_bad("transition to a parser state out of range");
    int32_t token = trie->token[node];
    if (token >= 0 && (buf_push(&out[OK_OWNER], owner) || buf_push(&out[OK_TOKEN], token))) return -1;
    if (tab->flags[next]) {
        if (buf_push(&out[EXIT_OWNER], owner) || buf_push(&out[EXIT_LO], trie->lo[node] + (token >= 0)) ||
            buf_push(&out[EXIT_HI], trie->hi[node]) || buf_push(&out[EXIT_DEPTH], trie->depth[node]))
            return -1;
    }
    int32_t lo = trie->child_lo[node], hi = trie->child_hi[node];
    if (!tab->has_stacks[next] || hi <= lo) return 0;
    if (lo < 0 || hi > trie->count) return cm_bad("trie children out of range");
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

/* The flat trie in buffers v[0..6] (byte, lo, hi, token, child_lo, child_hi, depth), every int32
 * array checked to hold one entry per node. */
static int trie_of(const Py_buffer *v, Trie *trie) {
    Py_ssize_t count = v[0].len;
    for (int i = 1; i <= 6; i++) {
        if (cm_need(&v[i], sizeof(int32_t), count, "trie array")) return -1;
    }
    *trie = (Trie){(const uint8_t *)v[0].buf, (const int32_t *)v[1].buf, (const int32_t *)v[2].buf,
                   (const int32_t *)v[3].buf, (const int32_t *)v[4].buf, (const int32_t *)v[5].buf,
                   (const int32_t *)v[6].buf, count};
    return 0;
}

/* A walk's result: a tuple of the bytes of its `count` output arrays (NULL with an exception set). */
PyObject *cm_outputs_tuple(const IntBuf *out, int count) {
    PyObject *result = PyTuple_New(count);
    if (!result) return NULL;
    for (int i = 0; i < count; i++) {
        PyObject *bytes = cm_buf_bytes(&out[i]);
        if (!bytes) {
            Py_DECREF(result);
            return NULL;
        }
        PyTuple_SET_ITEM(result, i, bytes);
    }
    return result;
}

PyObject *cm_walk(PyObject *self, PyObject *args) {
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
        cm_bad("table: not a whole number of rows of the alphabet (at least 256 symbols)");
        goto done;
    }
    tab.states = v[0].len / ((Py_ssize_t)sizeof(int32_t) * alphabet);
    if (cm_need(&v[1], 1, tab.states, "flags") || cm_need(&v[2], 1, tab.states, "has_stacks")) goto done;
    if (cm_need(&v[10], sizeof(int32_t), items, "nodes") || cm_need(&v[11], sizeof(int32_t), items, "states") ||
        cm_need(&v[12], sizeof(int32_t), items, "owners"))
        goto done;
    if (run(&trie, &tab, (const int32_t *)v[10].buf, (const int32_t *)v[11].buf, (const int32_t *)v[12].buf, items,
            out))
        goto done;
    result = cm_outputs_tuple(out, NUM_OUT);
done:
    for (int i = 0; i < NUM_OUT; i++) free(out[i].data);
    for (int i = 0; i < 13; i++) PyBuffer_Release(&v[i]);
    return result;
}
