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

#include "_native.h"

/* An int returned by a callable (a parser or lexer state), or FAILED. */
int32_t cm_state_result(PyObject *result) {
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
    if (!PyObject_TypeCheck(x, &cm_InternerType)) {
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
        cm_bad("kinds: more terminals than the parser's alphabet");
        goto done;
    }
    if ((indent >= s->x->alphabet || dedent >= s->x->alphabet || newline >= s->x->alphabet)) {
        cm_bad("indent, dedent or newline out of the parser's alphabet");
        goto done;
    }
    if (!(s->kind = (uint8_t *)cm_copy_array(&kinds, 1, s->terminals, "kinds")) ||
        !(s->allowed = (uint64_t *)cm_copy_array(&allowed, sizeof(uint64_t), s->rtn_states * s->words, "allowed")) ||
        !(s->scratch = (uint64_t *)calloc((size_t)s->words + 1, sizeof(uint64_t))) ||
        cm_u64_init(&s->by_hash, 8))
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
    if (cm_held_view(&s->x->held_table, s->parser, "core", "table", sizeof(int32_t), at + 1)) return -1;
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
        result = found != UNKNOWN ? found : cm_step_state(s->x, s->parser, state, symbol);
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
        Py_ssize_t id = found ? cm_as_id(found) : -1;
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
        Py_ssize_t id = cm_as_id(found);
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
    return cm_state_result(PyObject_CallFunction(s->after, "ii", pid, end_class));
}

/* `LexParserCore.after`: the parser state after a lexeme ended as `end_class` at `pid`. */
int32_t cm_ss_after(SymbolSteps *s, int32_t pid, int32_t end_class) {
    if (!s->parser) return cm_bad("SymbolSteps cleared"), FAILED;
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
    if (!PyTuple_Check(stacks)) return cm_bad("state stacks must be tuples");
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
int32_t cm_ss_fresh(SymbolSteps *s, int32_t pid) {
    if (!s->parser) return cm_bad("SymbolSteps cleared"), FAILED;
    long long inner = pid, depth = 0;
    if (s->keys) {
        PyObject *key = ss_key(s, pid);
        if (!key) return FAILED;
        if (PyTuple_GET_ITEM(key, 3) != Py_False || PyTuple_GET_ITEM(key, 5) != Py_None)
            return cm_state_result(PyObject_CallFunction(s->fresh, "i", pid));
        inner = tuple_long(key, 0);
        depth = tuple_long(key, 1);
        if (inner < 0 || depth < 0) return FAILED;
    }
    if (ss_allowed(s, inner, depth)) return FAILED;
    int32_t at = u64_get(&s->by_hash, bits_hash(s->scratch, s->words));
    if (at >= 0 && !memcmp(s->sets + at * s->words, s->scratch, (size_t)s->words * sizeof(uint64_t)))
        return s->lids[at];
    int32_t lid = cm_state_result(PyObject_CallFunction(s->fresh, "i", pid));
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
    if (cm_u64_put(&s->by_hash, h, (int32_t)s->count)) return FAILED;
    s->count++;
    return lid;
}

static PyObject *ss_after_call(SymbolSteps *s, PyObject *args) {
    int pid, end_class;
    if (!PyArg_ParseTuple(args, "ii", &pid, &end_class)) return NULL;
    int32_t result = cm_ss_after(s, pid, end_class);
    return result == FAILED ? NULL : PyLong_FromLong(result);
}

static PyObject *ss_fresh_call(SymbolSteps *s, PyObject *args) {
    int pid;
    if (!PyArg_ParseTuple(args, "i", &pid)) return NULL;
    int32_t result = cm_ss_fresh(s, pid);
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

PyTypeObject cm_SymbolStepsType = {
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
