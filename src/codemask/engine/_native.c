/* The mask cache's trie walk in C: the one loop of the engine that touches most of the vocabulary.
 *
 * `walk` consumes trie nodes' bytes from parser states through the memoised transition table
 * (`ParserCore.table`) depth first, exactly as `mask_cache._walk_scalar` does in Python, and
 * reports what it finds: tokens whose bytes are all consumed with the parse alive (ok), ranges of
 * tokens whose prefix reached the frame's bottom (exits, with the depth of that prefix), and the
 * (node, state) pairs whose transition the table does not know yet (pending). Python computes the
 * pending transitions (they intern new parser states) and calls again with the pending pairs;
 * the findings of all calls together are the walk's.
 *
 * Built as an optional extension (setup.py): without a C compiler the numpy walk is used instead,
 * and the tests compare the two. Every index read from the arguments is bounds-checked, so a bad
 * argument raises ValueError instead of reading out of bounds.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NATIVE_VERSION 1
#define UNKNOWN (-2)

typedef struct {
    int32_t *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} IntBuf;

static int buf_push(IntBuf *b, int32_t value) {
    if (b->size == b->cap) {
        Py_ssize_t cap = b->cap ? 2 * b->cap : 1024;
        int32_t *data = (int32_t *)realloc(b->data, (size_t)cap * sizeof(int32_t));
        if (!data) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = data;
        b->cap = cap;
    }
    b->data[b->size++] = value;
    return 0;
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

static int need(Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name) {
    if (view->len != itemsize * count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes, got %zd", name, itemsize * count, view->len);
        return -1;
    }
    return 0;
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
    Py_ssize_t count = v[3].len;
    Trie trie = {(const uint8_t *)v[3].buf, (const int32_t *)v[4].buf, (const int32_t *)v[5].buf,
                 (const int32_t *)v[6].buf, (const int32_t *)v[7].buf, (const int32_t *)v[8].buf,
                 (const int32_t *)v[9].buf, count};
    Py_ssize_t items = v[10].len / (Py_ssize_t)sizeof(int32_t);
    if (alphabet < 256 || v[0].len % ((Py_ssize_t)sizeof(int32_t) * alphabet)) {
        bad("table: not a whole number of rows of the alphabet (at least 256 symbols)");
        goto done;
    }
    tab.states = v[0].len / ((Py_ssize_t)sizeof(int32_t) * alphabet);
    if (need(&v[1], 1, tab.states, "flags") || need(&v[2], 1, tab.states, "has_stacks")) goto done;
    for (int i = 4; i <= 9; i++) {
        if (need(&v[i], sizeof(int32_t), count, "trie array")) goto done;
    }
    if (need(&v[10], sizeof(int32_t), items, "nodes") || need(&v[11], sizeof(int32_t), items, "states") ||
        need(&v[12], sizeof(int32_t), items, "owners"))
        goto done;
    if (run(&trie, &tab, (const int32_t *)v[10].buf, (const int32_t *)v[11].buf, (const int32_t *)v[12].buf, items,
            out))
        goto done;
    result = PyTuple_New(NUM_OUT);
    if (!result) goto done;
    for (int i = 0; i < NUM_OUT; i++) {
        PyObject *bytes = buf_bytes(&out[i]);
        if (!bytes) {
            Py_CLEAR(result);
            goto done;
        }
        PyTuple_SET_ITEM(result, i, bytes);
    }
done:
    for (int i = 0; i < NUM_OUT; i++) free(out[i].data);
    for (int i = 0; i < 13; i++) PyBuffer_Release(&v[i]);
    return result;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(table, alphabet, flags, has_stacks, byte, lo, hi, token, child_lo, child_hi, depth, nodes, states, "
     "owners) -> (ok_owner, ok_token, exit_owner, exit_lo, exit_hi, exit_depth, pending_node, pending_state, "
     "pending_owner), each the bytes of an int32 array"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "The mask cache's trie walk in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "VERSION", NATIVE_VERSION)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
