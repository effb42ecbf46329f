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

#include "_native.h"

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
        cm_bad("trans: not [states, 256] int32");
        goto done;
    }
    if (!(x->trans = (int32_t *)cm_copy_array(&v[0], sizeof(int32_t), x->states * 256, "trans")) ||
        !(x->accepting = (uint8_t *)cm_copy_array(&v[1], 1, x->states, "accepting")) ||
        !(x->terminal_of = (int32_t *)cm_copy_array(&v[2], sizeof(int32_t), x->states, "terminal_of")) ||
        !(x->rank = (int32_t *)cm_copy_array(&v[3], sizeof(int32_t), x->terminals, "rank")) ||
        !(x->retype_lo = (int32_t *)cm_copy_array(&v[4], sizeof(int32_t), x->terminals + 1, "retype_lo")))
        goto done;
    Py_ssize_t retypes = v[5].len / (Py_ssize_t)sizeof(int32_t);
    if (!(x->retype = (int32_t *)cm_copy_array(&v[5], sizeof(int32_t), retypes, "retype"))) goto done;
    for (Py_ssize_t s = 0; s < x->states * 256; s++) {
        if (x->trans[s] >= x->states) {
            cm_bad("trans: a state out of range");
            goto done;
        }
    }
    for (Py_ssize_t s = 0; s < x->states; s++) {
        if (x->terminal_of[s] < 0 || x->terminal_of[s] >= x->terminals) {
            cm_bad("terminal_of: a terminal out of range");
            goto done;
        }
    }
    if (x->retype_lo[0] != 0 || x->retype_lo[x->terminals] != retypes) {
        cm_bad("retype_lo: not the bounds of retype");
        goto done;
    }
    for (Py_ssize_t t = 0; t < x->terminals; t++) {
        if (x->retype_lo[t] > x->retype_lo[t + 1]) {
            cm_bad("retype_lo: not increasing");
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
    if (n > states) return cm_bad("more automaton states than the automata have");
    for (Py_ssize_t i = 0; i < n; i++) {
        long s = PyLong_AsLong(PyTuple_GET_ITEM(items, i));
        if (s == -1 && PyErr_Occurred()) return -1;
        if (s < 0 || s >= states) return cm_bad("automaton state out of range");
        out[i] = (int32_t)s;
    }
    return n;
}

/* Sort `n` ints and drop repeats (Python builds these as sets, then `tuple(sorted(...))`). */
static Py_ssize_t sort_unique(int32_t *a, Py_ssize_t n) {
    if (n < 2) return n;
    cm_sort_int32(a, n);
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
        Py_ssize_t id = cm_as_id(found);
        return id < 0 ? FAILED : (int32_t)id;
    }
    if (PyErr_Occurred()) return FAILED;
    PyObject *name = PyUnicode_InternFromString("intern");
    PyObject *made = name ? PyObject_CallMethodOneArg(core, name, key) : NULL;
    Py_XDECREF(name);
    if (!made) return FAILED;
    Py_ssize_t id = cm_as_id(made);
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
    PyObject *alternatives = cm_int_tuple(x->moved, n_moved);
    PyObject *trackers = alternatives ? cm_int_tuple(x->tracked, n_tracked) : NULL;
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
    if (cm_array_view(core, "lexer", "table", sizeof(int32_t), v->states * 256, &v->table) ||
        cm_array_view(core, "lexer", "end_class_of", sizeof(int32_t), v->states, &v->end_class_of) ||
        cm_array_view(core, "lexer", "poisoned", 1, v->states, &v->poisoned)) {
        views_release(v);
        return -1;
    }
    return 0;
}

/* `LexerCore.step`: the memoised transition, computed (and recorded) where the table does not know
 * it yet; FAILED on error. */
static int32_t lex_next(LexerStepper *x, PyObject *core, LexViews *v, int32_t state, uint8_t byte) {
    if (state < 0 || state >= v->states) return cm_bad("lexer state out of range"), FAILED;
    int32_t next = ((const int32_t *)v->table.buf)[(Py_ssize_t)state * 256 + byte];
    if (next == UNKNOWN) {
        next = stepper_compute(x, core, state, byte);
        if (next == FAILED) return FAILED;
        if (PyList_GET_SIZE(x->keys) != v->states && views_get(x, core, v)) return FAILED;
        ((int32_t *)v->table.buf)[(Py_ssize_t)state * 256 + byte] = next;
    }
    if (next >= v->states || next < DEAD) return cm_bad("transition to a lexer state out of range"), FAILED;
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
        if (cm_need(&v[i], sizeof(int32_t), n, "trie array")) goto done;
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
            cm_bad("trie arrays: a depth below 1 or a subtree end out of order");
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
        cm_bad("lexer state out of range");
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
            cm_bad("trie arrays: a node deeper than its parent's next level");
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
    result = cm_outputs_tuple(out, LX_NUM_OUT);
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
    if (cm_need(&v[2], sizeof(int32_t), count, "starts") || cm_need(&v[3], sizeof(int32_t), count, "lengths")) goto done;
    if (width <= 0 || v[0].len % width) {
        cm_bad("matrix: not a whole number of rows of the given width");
        goto done;
    }
    if (views_get(x, core, &views)) goto done;
    if (lid < 0 || lid >= views.states) {
        cm_bad("lexer state out of range");
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
            cm_bad("residual out of the matrix");
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
    qsort(keys, (size_t)ends, sizeof(uint64_t), cm_cmp_uint64);
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

PyTypeObject cm_LexerStepperType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.LexerStepper",
    .tp_basicsize = sizeof(LexerStepper),
    .tp_dealloc = (destructor)stepper_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LexerStepper(trans, accepting, terminal_of, rank, retype_lo, retype, newline, poison, keys, index, "
              "next_column): a LexerCore's transitions in C",
    .tp_methods = stepper_methods,
    .tp_new = stepper_new,
};
