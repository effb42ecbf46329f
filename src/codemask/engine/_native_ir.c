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

#include "_native.h"
#include <structmember.h>

enum { IR_LITERAL, IR_CHARCLASS, IR_BYTECLASS, IR_RULEREF, IR_TERMINALREF, IR_SEQUENCE, IR_CHOICE, IR_REPEAT, IR_KINDS };
enum { A_VALUE, A_RANGES, A_NEGATED, A_NAME, A_ITEMS, A_ALTERNATIVES, A_ITEM, A_MIN, A_MAX, A_HASH, A_COUNT };
static PyObject *ir_types[IR_KINDS];
static PyObject *ir_names[A_COUNT];
/* Per class and attribute, the offset of its slot in the object (-1: not a plain slot). The classes
 * are frozen dataclasses with slots, so an attribute is a pointer at a fixed place: reading it there
 * skips the type's attribute lookup, which was a fifth of the time of walking an expression. */
static Py_ssize_t ir_offsets[IR_KINDS][A_COUNT];
static PyObject *grammar_error_class;
#define MAX_CODE_POINT 0x10FFFF
#define MAX_EXPR_DEPTH 100000

/* The offset of ``name``'s slot in instances of ``type`` (-1 where it is not an object slot). */
static Py_ssize_t slot_offset(PyTypeObject *type, PyObject *name) {
    PyObject *descr = _PyType_Lookup(type, name);  /* (borrowed; NULL where absent, no error set) */
    if (!descr || !Py_IS_TYPE(descr, &PyMemberDescr_Type)) return -1;
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    return member->type == T_OBJECT_EX && !(member->flags & READ_RESTRICTED) ? member->offset : -1;
}

PyObject *cm_set_ir(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *types, *error;
    if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &types, &error)) return NULL;
    if (PyTuple_GET_SIZE(types) != IR_KINDS) return cm_bad("set_ir: the eight IR classes"), NULL;
    static const char *names[A_COUNT] = {"value", "ranges", "negated", "name", "items", "alternatives", "item", "min", "max",
                                         "_hash"};
    for (int k = 0; k < A_COUNT; k++) {
        if (!ir_names[k] && !(ir_names[k] = PyUnicode_InternFromString(names[k]))) return NULL;
    }
    for (int k = 0; k < IR_KINDS; k++) {
        PyObject *t = PyTuple_GET_ITEM(types, k);
        if (!PyType_Check(t)) return cm_bad("set_ir: not a class"), NULL;
        Py_INCREF(t);
        Py_XSETREF(ir_types[k], t);
        for (int a = 0; a < A_COUNT; a++) ir_offsets[k][a] = slot_offset((PyTypeObject *)t, ir_names[a]);
    }
    Py_INCREF(error);
    Py_XSETREF(grammar_error_class, error);
    Py_RETURN_NONE;
}

/* The IR kind of an object of exactly one of the IR's classes, -1 (no error set) otherwise. */
static int ir_kind_of(PyObject *obj) {
    for (int k = 0; k < IR_KINDS; k++) {
        if ((PyObject *)Py_TYPE(obj) == ir_types[k]) return k;
    }
    return -1;
}

/* `ir_kind_of`, a TypeError for anything else. */
static int ir_kind(PyObject *expr) {
    int kind = ir_kind_of(expr);
    if (kind < 0) PyErr_Format(PyExc_TypeError, "not a grammar expression: %R", expr);
    return kind;
}

static int grammar_error(const char *message) {
    PyErr_SetString(grammar_error_class ? grammar_error_class : PyExc_ValueError, message);
    return -1;
}

/* The object in slot `name` of `obj`, an instance of IR class `kind` (borrowed; NULL, no error set,
 * where `kind` is -1, the class has no such plain slot or it is unset). */
static PyObject *slot_value(PyObject *obj, int kind, int name) {
    Py_ssize_t offset = kind >= 0 ? ir_offsets[kind][name] : -1;
    return offset >= 0 ? *(PyObject **)((char *)obj + offset) : NULL;
}

/* An attribute of an expression (a new reference; NULL with an error where it is missing): read
 * from its slot where the class is one of the IR's, through the type otherwise. */
static PyObject *ir_attr(PyObject *expr, int name) {
    PyObject *value = slot_value(expr, ir_kind_of(expr), name);
    return value ? Py_NewRef(value) : PyObject_GetAttr(expr, ir_names[name]);  /* (the lookup says why not) */
}

/* An attribute of an expression that must be a tuple (items, alternatives, ranges). */
static PyObject *tuple_attr(PyObject *expr, int name) {
    PyObject *value = ir_attr(expr, name);
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
            uint64_t h = cm_seq_hash(key.data, key.size);
            int32_t found = cm_seqmap_get(&reg, key.data, key.size, h);
            if (found >= 0) {
                out[parent].data[out[parent].size - 1] = found; /* (the parent's last transition led to child) */
            } else if (cm_seqmap_put(&reg, key.data, key.size, h, child)) {
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
    cm_seqmap_free(&reg);
    return status;
}

static int xn_charclass(ExprNfa *b, PyObject *expr, int32_t src, int32_t dst) {
    if (b->terminal_index != Py_None) return grammar_error("a character class cannot appear in a parser rule of a lexer-mode grammar");
    PyObject *ranges = tuple_attr(expr, A_RANGES), *negated = ranges ? ir_attr(expr, A_NEGATED) : NULL;
    int64_t *pairs = NULL;
    Py_ssize_t count = 0;
    int is_negated = negated ? PyObject_IsTrue(negated) : -1;
    int status = is_negated < 0 ? -1 : class_ranges(ranges, is_negated, MAX_CODE_POINT, &pairs, &count);
    for (Py_ssize_t i = 0; !status && i < count; i++) {
        int64_t lo = pairs[2 * i], hi = pairs[2 * i + 1];
        if (lo < 0 || hi > MAX_CODE_POINT) {
            status = cm_bad("character class: a code point out of range");
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
            status = cm_bad("byte class: a byte out of range");
            break;
        }
        status = xn_edge(b, src, (int32_t)pairs[2 * i], (int32_t)pairs[2 * i + 1], dst);
    }
    free(pairs);
    Py_XDECREF(ranges);
    return status;
}

static int xn_ref(ExprNfa *b, PyObject *expr, int kind, int32_t src, int32_t dst) {
    PyObject *name = ir_attr(expr, A_NAME);
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
                cm_bad("rule or terminal index out of range");
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
    PyObject *item = ir_attr(expr, A_ITEM);
    PyObject *min_obj = item ? ir_attr(expr, A_MIN) : NULL;
    PyObject *max_obj = min_obj ? ir_attr(expr, A_MAX) : NULL;
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
        PyObject *value = ir_attr(expr, A_VALUE);
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
                PyObject *value = ir_attr(alt, A_VALUE);
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

/* dfa_of_expr(expr, rule_index, terminal_index, alphabet, max_nfa_states, max_dfa_states) -> (runs, run_lo,
 * accepting, calls, first): `dfa_of_nfa` of the Thompson NFA of `expr` (rule references read in `rule_index`, terminal
 * references in `terminal_index`, a dict in lexer mode and None otherwise). */
PyObject *cm_dfa_of_expr(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr;
    Py_ssize_t alphabet, max_dfa;
    ExprNfa b;
    memset(&b, 0, sizeof(b));
    if (!PyArg_ParseTuple(args, "OO!Onnn", &expr, &PyDict_Type, &b.rule_index, &b.terminal_index, &alphabet,
                          &b.max_states, &max_dfa))
        return NULL;
    if (!ir_types[0]) return cm_bad("dfa_of_expr: set_ir was not called"), NULL;
    if (b.terminal_index != Py_None && !PyDict_Check(b.terminal_index)) {
        PyErr_SetString(PyExc_TypeError, "terminal_index: a dict or None");
        return NULL;
    }
    PyObject *result = NULL;
    int32_t start = xn_state(&b), final = start < 0 ? -1 : xn_state(&b);
    if (final >= 0 && !xn_build(&b, expr, start, final)) {
        result = cm_dfa_of_nfa(b.count, start, final, b.eps.data, b.eps.size / 2, b.edges.data, b.edges.size / 4,
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

/* `n` in lowercase hexadecimal without leading zeros (printf's %llx, which took most of a large
 * grammar's text), then `after`. */
static int cb_hex(CharBuf *b, unsigned long long n, char after) {
    char digits[20];
    int k = (int)sizeof(digits);
    digits[--k] = after;
    do {
        digits[--k] = "0123456789abcdef"[n & 15];
        n >>= 4;
    } while (n);
    return cb_put(b, digits + k, (Py_ssize_t)sizeof(digits) - k);
}

static int text_ranges(CharBuf *b, PyObject *ranges) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(ranges); i++) {
        PyObject *pair = PyTuple_GET_ITEM(ranges, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "class ranges: (lo, hi) pairs expected");
            return -1;
        }
        long long lo = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0)), hi = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
        if (PyErr_Occurred()) return -1;
        if (lo < 0 || hi < 0) return cm_bad("class ranges: negative code points"), -1;
        if (cb_hex(b, (unsigned long long)lo, '-') || cb_hex(b, (unsigned long long)hi, ',')) return -1;
    }
    return 0;
}

static int text_expr(CharBuf *b, PyObject *expr, int depth) {
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int status = -1;
    if (kind == IR_LITERAL) {
        PyObject *value = ir_attr(expr, A_VALUE);
        PyObject *repr = value ? PyObject_Repr(value) : NULL;
        status = cb_obj(b, repr);
        Py_XDECREF(repr);
        Py_XDECREF(value);
    } else if (kind == IR_CHARCLASS || kind == IR_BYTECLASS) {
        PyObject *ranges = tuple_attr(expr, A_RANGES);
        int negated = 0;
        if (ranges && kind == IR_CHARCLASS) {
            PyObject *flag = ir_attr(expr, A_NEGATED);
            negated = flag ? PyObject_IsTrue(flag) : -1;
            Py_XDECREF(flag);
        }
        status = !ranges || negated < 0 || cb_str(b, kind == IR_BYTECLASS ? "b[" : negated ? "[^" : "[") ||
                         text_ranges(b, ranges) || cb_str(b, "]") ? -1 : 0;
        Py_XDECREF(ranges);
    } else if (kind == IR_RULEREF || kind == IR_TERMINALREF) {
        PyObject *name = ir_attr(expr, A_NAME);
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
        PyObject *item = ir_attr(expr, A_ITEM);
        PyObject *min_obj = item ? ir_attr(expr, A_MIN) : NULL;
        PyObject *max_obj = min_obj ? ir_attr(expr, A_MAX) : NULL;
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

PyObject *cm_expr_text(PyObject *self, PyObject *expr) {
    (void)self;
    if (!ir_types[0]) return cm_bad("expr_text: set_ir was not called"), NULL;
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
        PyObject *value = ir_attr(expr, A_VALUE);
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
            PyObject *flag = ir_attr(expr, A_NEGATED);
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
        PyObject *name = ir_attr(expr, A_NAME);
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
        PyObject *item = ir_attr(expr, A_ITEM);
        PyObject *min_obj = item ? ir_attr(expr, A_MIN) : NULL;
        PyObject *max_obj = min_obj ? ir_attr(expr, A_MAX) : NULL;
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
PyObject *cm_expr_digest(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr, *rule_index;
    if (!PyArg_ParseTuple(args, "OO!", &expr, &PyDict_Type, &rule_index)) return NULL;
    if (!ir_types[0]) return cm_bad("expr_digest: set_ir was not called"), NULL;
    Digest h = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull};
    if (dg_expr(&h, expr, rule_index, 0)) return NULL;
    uint64_t out[2] = {h.a ^ (h.b >> 17), h.b ^ (h.a << 13)};
    return PyBytes_FromStringAndSize((const char *)out, sizeof(out));
}

/* -- least fixed points over rules (`optimize._least_fixed_point`) ----------------------------- */

/* The and/or gates of a least fixed point: `need[g]` inputs of gate `g` still to hold, and edges
 * from a gate to the gates it feeds (>= 0) or to the body of rule `r` (~r); a reference to rule `r`
 * is a gate of one input that holds once `r` does (`watch`). Nodes met again (shared subtrees)
 * are read once (`memo`, by address). */
#define LF_FALSE (-5) /* (FAILED is -3, and UNKNOWN -2 the memo's absent entry) */
#define LF_TRUE (-6)

typedef struct {
    IntBuf need, edge_src, edge_dst, watch_rule, watch_gate, inputs;
    U64Map memo;
    PyObject *rule_index;
    int nullable;
} Gates;

static int32_t lf_new(Gates *g, int32_t need) {
    int32_t id = (int32_t)g->need.size;
    return buf_push(&g->need, need) ? FAILED : id;
}

static int lf_edge(Gates *g, int32_t src, int32_t dst) {
    return buf_push(&g->edge_src, src) || buf_push(&g->edge_dst, dst) ? -1 : 0;
}

/* LF_TRUE or LF_FALSE for a node other than a sequence, choice, repetition or reference: whether it
 * derives a string (a class of nothing but surrogates matches no UTF-8 either), or the empty one. */
static int32_t lf_leaf(Gates *g, PyObject *expr, int kind) {
    if (kind == IR_LITERAL) {
        if (!g->nullable) return LF_TRUE;
        PyObject *value = ir_attr(expr, A_VALUE);
        if (!value) return FAILED;
        Py_ssize_t n = PyObject_Length(value);
        Py_DECREF(value);
        return n < 0 ? FAILED : n == 0 ? LF_TRUE : LF_FALSE;
    }
    if (g->nullable) return LF_FALSE; /* (classes and terminals consume input) */
    if (kind == IR_BYTECLASS) {
        PyObject *ranges = tuple_attr(expr, A_RANGES);
        if (!ranges) return FAILED;
        int32_t holds = PyTuple_GET_SIZE(ranges) ? LF_TRUE : LF_FALSE;
        Py_DECREF(ranges);
        return holds;
    }
    if (kind != IR_CHARCLASS) return LF_TRUE;
    PyObject *ranges = tuple_attr(expr, A_RANGES);
    PyObject *flag = ranges ? ir_attr(expr, A_NEGATED) : NULL;
    int negated = flag ? PyObject_IsTrue(flag) : -1;
    Py_XDECREF(flag);
    int64_t *pairs = NULL;
    Py_ssize_t count = 0;
    int status = negated < 0 ? -1 : class_ranges(ranges, negated, MAX_CODE_POINT, &pairs, &count);
    Py_XDECREF(ranges);
    if (status) return FAILED;
    int32_t holds = LF_FALSE;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (pairs[2 * i] < 0xD800 || pairs[2 * i + 1] > 0xDFFF) holds = LF_TRUE;
    }
    free(pairs);
    return holds;
}

static int32_t lf_gate(Gates *g, PyObject *expr, int depth);

/* The gate of all (`every`) or any of `parts`; the parts after one that decides it whatever the set
 * (a failing item, a holding alternative) are not read. */
static int32_t lf_combined(Gates *g, PyObject *parts, int every, int depth) {
    int32_t decides = every ? LF_FALSE : LF_TRUE;
    Py_ssize_t base = g->inputs.size;
    int32_t made = every ? LF_TRUE : LF_FALSE;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts); k++) {
        int32_t part = lf_gate(g, PyTuple_GET_ITEM(parts, k), depth + 1);
        if (part == FAILED || part == decides) {
            g->inputs.size = base;
            return part;
        }
        if (part >= 0 && buf_push(&g->inputs, part)) return FAILED;
    }
    int32_t *in = g->inputs.data + base;
    Py_ssize_t n = g->inputs.size - base, distinct = 0;
    cm_sort_int32(in, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!distinct || in[i] != in[distinct - 1]) in[distinct++] = in[i];
    }
    if (distinct == 1) {
        made = in[0];
    } else if (distinct > 1) {
        made = lf_new(g, every ? (int32_t)distinct : 1);
        for (Py_ssize_t i = 0; made != FAILED && i < distinct; i++) {
            if (lf_edge(g, g->inputs.data[base + i], made)) made = FAILED;
        }
    }
    g->inputs.size = base;
    return made;
}

/* LF_TRUE or LF_FALSE where `expr` holds or fails whatever the set, else its gate; FAILED on error. */
static int32_t lf_gate(Gates *g, PyObject *expr, int depth) {
    uint64_t key = (uint64_t)(uintptr_t)expr;
    int32_t made = u64_get(&g->memo, key);
    if (made != UNKNOWN) return made;
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply"), FAILED;
    int kind = ir_kind(expr);
    if (kind < 0) return FAILED;
    if (kind == IR_RULEREF) {
        PyObject *name = ir_attr(expr, A_NAME);
        PyObject *index = name ? PyDict_GetItemWithError(g->rule_index, name) : NULL;
        long rule = index ? PyLong_AsLong(index) : -1;
        Py_XDECREF(name);
        if (PyErr_Occurred()) return FAILED;
        made = lf_new(g, 1); /* (a rule not in the set never holds: its gate never fires) */
        if (made != FAILED && rule >= 0 && (buf_push(&g->watch_rule, (int32_t)rule) || buf_push(&g->watch_gate, made)))
            made = FAILED;
    } else if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        made = parts ? lf_combined(g, parts, kind == IR_SEQUENCE, depth) : FAILED;
        Py_XDECREF(parts);
    } else if (kind == IR_REPEAT) {
        PyObject *min_obj = ir_attr(expr, A_MIN);
        long long min = min_obj ? PyLong_AsLongLong(min_obj) : -1;
        Py_XDECREF(min_obj);
        if (PyErr_Occurred()) return FAILED;
        if (min == 0) {
            made = LF_TRUE;
        } else {
            PyObject *item = ir_attr(expr, A_ITEM);
            made = item ? lf_gate(g, item, depth + 1) : FAILED;
            Py_XDECREF(item);
        }
    } else {
        made = lf_leaf(g, expr, kind);
    }
    if (made != FAILED && cm_u64_put(&g->memo, key, made)) return FAILED;
    return made;
}

/* Offsets of a CSR grouping of `n` pairs by `keys` (< `count`), and the pairs' order. */
static int csr(const int32_t *keys, Py_ssize_t n, Py_ssize_t count, Py_ssize_t **lo, int32_t **order) {
    *lo = (Py_ssize_t *)calloc((size_t)count + 1, sizeof(Py_ssize_t));
    *order = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!*lo || !*order) return PyErr_NoMemory(), -1;
    for (Py_ssize_t i = 0; i < n; i++) (*lo)[keys[i] + 1]++;
    for (Py_ssize_t k = 0; k < count; k++) (*lo)[k + 1] += (*lo)[k];
    Py_ssize_t *at = (Py_ssize_t *)malloc((size_t)(count ? count : 1) * sizeof(Py_ssize_t));
    if (!at) return PyErr_NoMemory(), -1;
    memcpy(at, *lo, (size_t)count * sizeof(Py_ssize_t));
    for (Py_ssize_t i = 0; i < n; i++) (*order)[at[keys[i]]++] = (int32_t)i;
    free(at);
    return 0;
}

/* least_fixed_point(bodies, rule_index, nullable) -> bytes: per rule of `bodies` (a list, in the
 * order of `rule_index`'s indices), 1 where its body holds in the least set of rules closed under:
 * a sequence holds when all its items do, a choice when one alternative does, a repetition when it
 * may be empty or its item holds, a reference when its rule is in the set; a literal, class or
 * terminal as it derives a string (`nullable` false: the productive rules) or the empty one
 * (`nullable`). Each node is read once and each edge counted down once. */
PyObject *cm_least_fixed_point(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *bodies, *rule_index;
    int nullable;
    if (!PyArg_ParseTuple(args, "O!O!p", &PyList_Type, &bodies, &PyDict_Type, &rule_index, &nullable)) return NULL;
    if (!ir_types[0]) return cm_bad("least_fixed_point: set_ir was not called"), NULL;
    Py_ssize_t rules = PyList_GET_SIZE(bodies);
    Gates g = {.rule_index = rule_index, .nullable = nullable};
    PyObject *result = NULL;
    uint8_t *found = (uint8_t *)calloc((size_t)(rules ? rules : 1), 1);
    IntBuf ready = {0};
    Py_ssize_t *edge_lo = NULL, *watch_lo = NULL;
    int32_t *edge_order = NULL, *watch_order = NULL;
    if (!found || cm_u64_init(&g.memo, 10)) goto done;
    for (Py_ssize_t r = 0; r < rules; r++) {
        int32_t root = lf_gate(&g, PyList_GET_ITEM(bodies, r), 0);
        if (root == FAILED) goto done;
        if (root == LF_TRUE ? buf_push(&ready, (int32_t)r) : root >= 0 && lf_edge(&g, root, ~(int32_t)r)) goto done;
    }
    Py_ssize_t gates = g.need.size;
    for (Py_ssize_t i = 0; i < g.watch_rule.size; i++) {
        if (g.watch_rule.data[i] >= rules) {
            cm_bad("least_fixed_point: a rule index beyond the bodies");
            goto done;
        }
    }
    if (csr(g.edge_src.data, g.edge_src.size, gates, &edge_lo, &edge_order) ||
        csr(g.watch_rule.data, g.watch_rule.size, rules, &watch_lo, &watch_order))
        goto done;
    IntBuf stack = {0};
    while (ready.size) {
        int32_t r = ready.data[--ready.size];
        if (found[r]) continue;
        found[r] = 1;
        for (Py_ssize_t w = watch_lo[r]; w < watch_lo[r + 1]; w++) {
            if (buf_push(&stack, g.watch_gate.data[watch_order[w]])) goto fired;
        }
        while (stack.size) {
            int32_t gate = stack.data[--stack.size];
            for (Py_ssize_t e = edge_lo[gate]; e < edge_lo[gate + 1]; e++) {
                int32_t target = g.edge_dst.data[edge_order[e]];
                if (target < 0) {
                    if (buf_push(&ready, ~target)) goto fired;
                } else if (--g.need.data[target] == 0 && buf_push(&stack, target)) {
                    goto fired;
                }
            }
        }
    }
    result = PyBytes_FromStringAndSize((const char *)found, rules);
fired:
    free(stack.data);
done:
    free(found);
    free(ready.data);
    free(edge_lo);
    free(edge_order);
    free(watch_lo);
    free(watch_order);
    free(g.need.data);
    free(g.edge_src.data);
    free(g.edge_dst.data);
    free(g.watch_rule.data);
    free(g.watch_gate.data);
    free(g.inputs.data);
    free(g.memo.keys);
    free(g.memo.values);
    return result;
}

/* -- the inliner's measures (`optimize._count_uses`, `optimize.expr_size`) ---------------------- */

#define SAT_MAX ((int64_t)1 << 60)

static int64_t sat_add(int64_t a, int64_t b) {
    return a > SAT_MAX - b ? SAT_MAX : a + b;
}

static int64_t sat_mul(int64_t a, int64_t b) {
    return b && a > SAT_MAX / b ? SAT_MAX : a * b;
}

/* A repetition's bounds: `*min`, and `*max` (-1 where unbounded). */
static int repeat_bounds(PyObject *expr, long long *min, long long *max) {
    PyObject *min_obj = ir_attr(expr, A_MIN);
    PyObject *max_obj = min_obj ? ir_attr(expr, A_MAX) : NULL;
    if (max_obj) {
        *min = PyLong_AsLongLong(min_obj);
        *max = max_obj == Py_None ? -1 : PyLong_AsLongLong(max_obj);
    }
    Py_XDECREF(min_obj);
    Py_XDECREF(max_obj);
    return !max_obj || PyErr_Occurred() ? -1 : 0;
}

static int uses_of(PyObject *expr, PyObject *uses, int64_t copies, int depth) {
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (kind == IR_RULEREF) {
        PyObject *name = ir_attr(expr, A_NAME);
        if (!name) return -1;
        PyObject *before = PyDict_GetItemWithError(uses, name);
        long long had = before ? PyLong_AsLongLong(before) : 0;
        PyObject *now = PyErr_Occurred() ? NULL : PyLong_FromLongLong(sat_add(had, copies));
        int status = now ? PyDict_SetItem(uses, name, now) : -1;
        Py_XDECREF(now);
        Py_DECREF(name);
        return status;
    }
    if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        if (!parts) return -1;
        int status = 0;
        for (Py_ssize_t k = 0; !status && k < PyTuple_GET_SIZE(parts); k++) {
            status = uses_of(PyTuple_GET_ITEM(parts, k), uses, copies, depth + 1);
        }
        Py_DECREF(parts);
        return status;
    }
    if (kind == IR_REPEAT) {
        long long min, max;
        if (repeat_bounds(expr, &min, &max)) return -1;
        /* the automaton unrolls a bounded repetition: each copy is a use of the rules inside */
        int64_t unrolled = max < 0 ? (min > 1 ? min : 1) + 1 : (max > 1 ? max : 1);
        PyObject *item = ir_attr(expr, A_ITEM);
        int status = item ? uses_of(item, uses, sat_mul(copies, unrolled), depth + 1) : -1;
        Py_XDECREF(item);
        return status;
    }
    return 0;
}

/* rule_uses(expr, uses): adds to the dict `uses` every rule reference in `expr`, once per copy the
 * automaton will hold (`optimize._count_uses`). */
PyObject *cm_rule_uses(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr, *uses;
    if (!PyArg_ParseTuple(args, "OO!", &expr, &PyDict_Type, &uses)) return NULL;
    if (!ir_types[0]) return cm_bad("rule_uses: set_ir was not called"), NULL;
    if (uses_of(expr, uses, 1, 0)) return NULL;
    Py_RETURN_NONE;
}

/* `expr_weight` of a node other than a sequence, choice, repetition or reference. */
static int64_t leaf_weight(PyObject *expr, int kind) {
    if (kind == IR_LITERAL) {
        PyObject *value = ir_attr(expr, A_VALUE);
        Py_ssize_t n = value ? PyObject_Length(value) : -1;
        Py_XDECREF(value);
        return n < 0 ? -1 : n > 1 ? n : 1;
    }
    if (kind == IR_CHARCLASS || kind == IR_BYTECLASS) {
        PyObject *ranges = tuple_attr(expr, A_RANGES);
        if (!ranges) return -1;
        int64_t weight = 1 + PyTuple_GET_SIZE(ranges);
        Py_DECREF(ranges);
        return weight;
    }
    return 1;
}

typedef struct {
    int64_t weight, depth;
    PyObject *kind; /* borrowed: an IR class */
} Size;

static int size_of(PyObject *expr, PyObject *inlined, Size *out, int depth) {
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (kind == IR_RULEREF) {
        PyObject *name = ir_attr(expr, A_NAME);
        PyObject *known = name ? PyDict_GetItemWithError(inlined, name) : NULL;
        Py_XDECREF(name);
        if (PyErr_Occurred()) return -1;
        *out = (Size){1, 1, ir_types[IR_RULEREF]};
        if (known) {
            if (!PyTuple_Check(known) || PyTuple_GET_SIZE(known) != 3) return cm_bad("expr_size: (weight, depth, kind)");
            out->weight = PyLong_AsLongLong(PyTuple_GET_ITEM(known, 0));
            out->depth = PyLong_AsLongLong(PyTuple_GET_ITEM(known, 1));
            out->kind = PyTuple_GET_ITEM(known, 2);
            if (PyErr_Occurred()) return -1;
        }
        return 0;
    }
    if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        if (!parts) return -1;
        int64_t weight = 1, deepest = 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts); k++) {
            Size part;
            if (size_of(PyTuple_GET_ITEM(parts, k), inlined, &part, depth + 1)) {
                Py_DECREF(parts);
                return -1;
            }
            weight = sat_add(weight, part.weight);
            /* (a sequence inlined into a sequence, a choice into a choice, is spliced: no level) */
            int64_t d = part.kind == ir_types[kind] ? part.depth - 1 : part.depth;
            if (d > deepest) deepest = d;
        }
        Py_DECREF(parts);
        *out = (Size){weight, 1 + deepest, ir_types[kind]};
        return 0;
    }
    if (kind == IR_REPEAT) {
        long long min, max;
        if (repeat_bounds(expr, &min, &max)) return -1;
        PyObject *item = ir_attr(expr, A_ITEM);
        Size inner;
        int status = item ? size_of(item, inlined, &inner, depth + 1) : -1;
        Py_XDECREF(item);
        if (status) return -1;
        int64_t copies = max < 0 ? (min > 1 ? min : 1) : (max > 1 ? max : 1);
        *out = (Size){sat_add(1, sat_mul(copies, inner.weight)), 1 + inner.depth, ir_types[IR_REPEAT]};
        return 0;
    }
    int64_t weight = leaf_weight(expr, kind);
    if (weight < 0) return -1;
    *out = (Size){weight, 1, ir_types[kind]};
    return 0;
}

/* expr_size(expr, inlined) -> (weight, depth, kind): `optimize.expr_size`, the weights saturating
 * at 2**60. */
PyObject *cm_expr_size(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr, *inlined;
    if (!PyArg_ParseTuple(args, "OO!", &expr, &PyDict_Type, &inlined)) return NULL;
    if (!ir_types[0]) return cm_bad("expr_size: set_ir was not called"), NULL;
    Size size;
    if (size_of(expr, inlined, &size, 0)) return NULL;
    return Py_BuildValue("(LLO)", (long long)size.weight, (long long)size.depth, size.kind);
}

/* -- left calls (`optimize.left_calls`) ------------------------------------------------------- */

/* Whether `expr` derives the empty string, given the set `nullable` of rule names
 * (`optimize.is_nullable`): 1, 0, or -1 on error. */
static int lc_nullable(PyObject *expr, PyObject *nullable, int depth) {
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (kind == IR_LITERAL) {
        PyObject *value = ir_attr(expr, A_VALUE);
        Py_ssize_t n = value ? PyObject_Length(value) : -1;
        Py_XDECREF(value);
        return n < 0 ? -1 : n == 0;
    }
    if (kind == IR_RULEREF) {
        PyObject *name = ir_attr(expr, A_NAME);
        int found = name ? PySet_Contains(nullable, name) : -1;
        Py_XDECREF(name);
        return found;
    }
    if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        if (!parts) return -1;
        int every = kind == IR_SEQUENCE, result = every;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(parts); k++) {
            int part = lc_nullable(PyTuple_GET_ITEM(parts, k), nullable, depth + 1);
            if (part < 0 || part != every) {
                result = part;
                break;
            }
        }
        Py_DECREF(parts);
        return result;
    }
    if (kind == IR_REPEAT) {
        long long min, max;
        if (repeat_bounds(expr, &min, &max)) return -1;
        if (min == 0) return 1;
        PyObject *item = ir_attr(expr, A_ITEM);
        int result = item ? lc_nullable(item, nullable, depth + 1) : -1;
        Py_XDECREF(item);
        return result;
    }
    return 0; /* (classes and terminals consume input) */
}

static int lc_add(PyObject *expr, PyObject *nullable, PyObject *found, int depth) {
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    if (kind == IR_RULEREF) {
        PyObject *name = ir_attr(expr, A_NAME);
        int status = name ? PySet_Add(found, name) : -1;
        Py_XDECREF(name);
        return status;
    }
    if (kind == IR_SEQUENCE || kind == IR_CHOICE) {
        PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
        if (!parts) return -1;
        int status = 0;
        for (Py_ssize_t k = 0; !status && k < PyTuple_GET_SIZE(parts); k++) {
            PyObject *part = PyTuple_GET_ITEM(parts, k);
            status = lc_add(part, nullable, found, depth + 1);
            if (!status && kind == IR_SEQUENCE) {
                int empty = lc_nullable(part, nullable, depth + 1);
                if (empty <= 0) {
                    status = empty; /* (a part that consumes input ends the left edge) */
                    break;
                }
            }
        }
        Py_DECREF(parts);
        return status;
    }
    if (kind == IR_REPEAT) {
        long long min, max;
        if (repeat_bounds(expr, &min, &max)) return -1;
        if (max == 0) return 0;
        PyObject *item = ir_attr(expr, A_ITEM);
        int status = item ? lc_add(item, nullable, found, depth + 1) : -1;
        Py_XDECREF(item);
        return status;
    }
    return 0;
}

/* left_calls(expr, nullable) -> set: the rules `expr` may call before consuming any input, given
 * the set of nullable rule names (`optimize.left_calls`). */
PyObject *cm_left_calls(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr, *nullable;
    if (!PyArg_ParseTuple(args, "OO", &expr, &nullable)) return NULL;
    if (!PyAnySet_Check(nullable)) return PyErr_SetString(PyExc_TypeError, "left_calls: a set of names"), NULL;
    if (!ir_types[0]) return cm_bad("left_calls: set_ir was not called"), NULL;
    PyObject *found = PySet_New(NULL);
    if (found && lc_add(expr, nullable, found, 0)) Py_CLEAR(found);
    return found;
}

/* -- walks of every node: references (`ir.references`) and repetition bounds (`counting`) ------ */

/* The visitor of `each_node`: called on every node, parents first; non-zero stops the walk (-1: an
 * error is set). */
typedef int (*ExprVisit)(PyObject *expr, int kind, void *context);

static int each_node(PyObject *expr, ExprVisit visit, void *context, int depth) {
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply");
    int kind = ir_kind(expr);
    if (kind < 0) return -1;
    int status = visit(expr, kind, context);
    if (status || (kind != IR_SEQUENCE && kind != IR_CHOICE && kind != IR_REPEAT)) return status;
    if (kind == IR_REPEAT) {
        PyObject *item = ir_attr(expr, A_ITEM);
        status = item ? each_node(item, visit, context, depth + 1) : -1;
        Py_XDECREF(item);
        return status;
    }
    PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
    if (!parts) return -1;
    for (Py_ssize_t k = 0; !status && k < PyTuple_GET_SIZE(parts); k++) {
        status = each_node(PyTuple_GET_ITEM(parts, k), visit, context, depth + 1);
    }
    Py_DECREF(parts);
    return status;
}

/* `each_node` visitor: a reference's name into the rules' or the terminals' set (`context`: both). */
static int add_name(PyObject *expr, int kind, void *context) {
    if (kind != IR_RULEREF && kind != IR_TERMINALREF) return 0;
    PyObject **sets = (PyObject **)context;
    PyObject *name = ir_attr(expr, A_NAME);
    int status = name ? PySet_Add(sets[kind == IR_RULEREF ? 0 : 1], name) : -1;
    Py_XDECREF(name);
    return status;
}

/* expr_names(expr) -> (frozenset, frozenset): the rules and the terminals `expr` references. */
PyObject *cm_expr_names(PyObject *self, PyObject *expr) {
    (void)self;
    if (!ir_types[0]) return cm_bad("expr_names: set_ir was not called"), NULL;
    PyObject *rules = PyFrozenSet_New(NULL), *terminals = PyFrozenSet_New(NULL), *result = NULL;
    /* (filled before anything else sees them, as CPython's own frozenset construction does) */
    PyObject *sets[2] = {rules, terminals};
    if (rules && terminals && !each_node(expr, add_name, sets, 0)) result = PyTuple_Pack(2, rules, terminals);
    Py_XDECREF(rules);
    Py_XDECREF(terminals);
    return result;
}

/* `each_node` visitor: the largest repetition bound so far (`context`: a long long). */
static int note_bound(PyObject *expr, int kind, void *context) {
    if (kind != IR_REPEAT) return 0;
    long long min, max, *largest = (long long *)context;
    if (repeat_bounds(expr, &min, &max)) return -1;
    if (min > *largest) *largest = min;
    if (max > *largest) *largest = max;
    return 0;
}

/* largest_repeat_bound(expr) -> int: the largest bound (min or max) of a repetition in `expr`, 0 if
 * none (`counting` leaves a body without a large one as it is). */
PyObject *cm_largest_repeat_bound(PyObject *self, PyObject *expr) {
    (void)self;
    if (!ir_types[0]) return cm_bad("largest_repeat_bound: set_ir was not called"), NULL;
    long long largest = 0;
    if (each_node(expr, note_bound, &largest, 0)) return NULL;
    return PyLong_FromLongLong(largest);
}

/* -- rule references replaced (`optimize._substitute`) ----------------------------------------- */

typedef struct {
    PyObject *map, *seq, *choice, *repeat, *nothing; /* names -> expressions; the IR's builders */
} Substitution;

static int is_nothing(PyObject *expr) {
    if ((PyObject *)Py_TYPE(expr) != ir_types[IR_CHOICE]) return 0;
    PyObject *alts = tuple_attr(expr, A_ALTERNATIVES);
    int empty = alts ? PyTuple_GET_SIZE(alts) == 0 : -1;
    Py_XDECREF(alts);
    return empty;
}

static PyObject *substituted(Substitution *s, PyObject *expr, int depth);

/* A sequence or choice with its parts substituted: the same object where no part changed. */
static PyObject *substituted_parts(Substitution *s, PyObject *expr, int kind, int depth) {
    PyObject *parts = tuple_attr(expr, kind == IR_SEQUENCE ? A_ITEMS : A_ALTERNATIVES);
    if (!parts) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(parts);
    PyObject *out = PyTuple_New(n), *result = NULL;
    int changed = 0, nothing = 0;
    Py_ssize_t kept = 0;
    if (!out) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *part = PyTuple_GET_ITEM(parts, k), *made = substituted(s, part, depth + 1);
        if (!made) goto done;
        changed |= made != part;
        int empty = is_nothing(made);
        if (empty < 0) {
            Py_DECREF(made);
            goto done;
        }
        if (empty && kind == IR_CHOICE) { /* (an alternative that matches nothing is dropped) */
            Py_DECREF(made);
            continue;
        }
        nothing |= empty;
        PyTuple_SET_ITEM(out, kept++, made);
    }
    if (!changed) {
        result = Py_NewRef(expr);
    } else if (nothing || (kind == IR_CHOICE && kept == 0)) {
        result = Py_NewRef(s->nothing);
    } else {
        if (kept < n && _PyTuple_Resize(&out, kept)) goto done;
        result = PyObject_Call(kind == IR_SEQUENCE ? s->seq : s->choice, out, NULL);
    }
done:
    Py_XDECREF(out);
    Py_DECREF(parts);
    return result;
}

static PyObject *substituted(Substitution *s, PyObject *expr, int depth) {
    if (depth > MAX_EXPR_DEPTH) return grammar_error("grammar expression nested too deeply"), NULL;
    int kind = ir_kind(expr);
    if (kind < 0) return NULL;
    if (kind == IR_RULEREF) {
        PyObject *name = ir_attr(expr, A_NAME);
        PyObject *found = name ? PyDict_GetItemWithError(s->map, name) : NULL;
        Py_XDECREF(name);
        if (PyErr_Occurred()) return NULL;
        return Py_NewRef(found ? found : expr);
    }
    if (kind == IR_SEQUENCE || kind == IR_CHOICE) return substituted_parts(s, expr, kind, depth);
    if (kind != IR_REPEAT) return Py_NewRef(expr);
    PyObject *item = ir_attr(expr, A_ITEM);
    PyObject *made = item ? substituted(s, item, depth + 1) : NULL, *result = NULL;
    if (made == item) {
        result = made ? Py_NewRef(expr) : NULL;
    } else if (made) {
        PyObject *min_obj = ir_attr(expr, A_MIN);
        PyObject *max_obj = min_obj ? ir_attr(expr, A_MAX) : NULL;
        int empty = max_obj ? is_nothing(made) : -1;
        long long min = empty >= 0 ? PyLong_AsLongLong(min_obj) : -1;
        if (empty > 0 && !PyErr_Occurred()) { /* (nothing repeated: only the empty string, where allowed) */
            result = min == 0 ? PyObject_CallNoArgs(s->seq) : Py_NewRef(s->nothing);
        } else if (empty == 0) {
            result = PyObject_CallFunctionObjArgs(s->repeat, made, min_obj, max_obj, NULL);
        }
        Py_XDECREF(min_obj);
        Py_XDECREF(max_obj);
    }
    Py_XDECREF(made);
    Py_XDECREF(item);
    return result;
}

/* substitute(expr, replacements, seq, choice, repeat, nothing) -> Expr: `expr` with each reference
 * to a rule named in the dict `replacements` replaced by its expression, rebuilt with the IR's
 * builders where anything changed and the same object elsewhere (`optimize._substitute`). */
PyObject *cm_substitute(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *expr;
    Substitution s;
    if (!PyArg_ParseTuple(args, "OO!OOOO", &expr, &PyDict_Type, &s.map, &s.seq, &s.choice, &s.repeat, &s.nothing))
        return NULL;
    if (!ir_types[0]) return cm_bad("substitute: set_ir was not called"), NULL;
    return substituted(&s, expr, 0);
}

/* strongly_connected(edges) -> list of lists: Tarjan's strongly connected components of the graph
 * whose node i has the edges `edges[i]` (a list of node numbers, each below len(edges)), in the
 * order Tarjan finds them (a component after every component it reaches), iteratively; the
 * optimiser's call graphs (`optimize._strongly_connected`). */
PyObject *cm_strongly_connected(PyObject *self, PyObject *edges) {
    if (!PyList_Check(edges)) {
        PyErr_SetString(PyExc_TypeError, "edges: a list of lists of node numbers");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(edges), m = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(edges, i);
        if (!PyList_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "edges: a list of lists of node numbers");
            return NULL;
        }
        m += PyList_GET_SIZE(row);
    }
    Py_ssize_t *off = (Py_ssize_t *)malloc((size_t)(n + 1) * sizeof(Py_ssize_t));
    Py_ssize_t *adj = (Py_ssize_t *)malloc((size_t)(m ? m : 1) * sizeof(Py_ssize_t));
    Py_ssize_t *index = (Py_ssize_t *)malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    Py_ssize_t *low = (Py_ssize_t *)malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    Py_ssize_t *next_edge = (Py_ssize_t *)malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    Py_ssize_t *path = (Py_ssize_t *)malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));  /* the depth-first path */
    Py_ssize_t *stack = (Py_ssize_t *)malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t)); /* Tarjan's stack */
    uint8_t *on_stack = (uint8_t *)calloc((size_t)(n ? n : 1), 1);
    PyObject *result = NULL, *components = NULL;
    if (!off || !adj || !index || !low || !next_edge || !path || !stack || !on_stack) {
        PyErr_NoMemory();
        goto done;
    }
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(edges, i);
        Py_ssize_t k = off[i];
        for (Py_ssize_t j = 0; j < PyList_GET_SIZE(row); j++) {
            Py_ssize_t target = PyLong_AsSsize_t(PyList_GET_ITEM(row, j));
            if (target == -1 && PyErr_Occurred()) goto done;
            if (target < 0 || target >= n) {
                index_error("edges: a node number out of range");
                goto done;
            }
            adj[k++] = target;
        }
        off[i + 1] = k;
        index[i] = -1;
    }
    if (!(components = PyList_New(0))) goto done;
    Py_ssize_t counter = 0, depth = 0, height = 0;
    for (Py_ssize_t root = 0; root < n; root++) {
        if (index[root] >= 0) continue;
        index[root] = low[root] = counter++;
        stack[height++] = root;
        on_stack[root] = 1;
        next_edge[root] = off[root];
        path[depth++] = root;
        while (depth) {
            Py_ssize_t node = path[depth - 1];
            if (next_edge[node] < off[node + 1]) {
                Py_ssize_t child = adj[next_edge[node]++];
                if (index[child] < 0) {
                    index[child] = low[child] = counter++;
                    stack[height++] = child;
                    on_stack[child] = 1;
                    next_edge[child] = off[child];
                    path[depth++] = child;
                } else if (on_stack[child] && index[child] < low[node]) {
                    low[node] = index[child];
                }
                continue;
            }
            depth--;
            if (depth && low[node] < low[path[depth - 1]]) low[path[depth - 1]] = low[node];
            if (low[node] != index[node]) continue;
            PyObject *component = PyList_New(0);
            if (!component || PyList_Append(components, component)) {
                Py_XDECREF(component);
                goto done;
            }
            Py_DECREF(component);
            Py_ssize_t member;
            do {
                member = stack[--height];
                on_stack[member] = 0;
                PyObject *number = PyLong_FromSsize_t(member);
                if (!number || PyList_Append(component, number)) {
                    Py_XDECREF(number);
                    goto done;
                }
                Py_DECREF(number);
            } while (member != node);
        }
    }
    result = components;
    components = NULL;
done:
    Py_XDECREF(components);
    free(off);
    free(adj);
    free(index);
    free(low);
    free(next_edge);
    free(path);
    free(stack);
    free(on_stack);
    return result;
}

/* -- building expressions (`ir.seq`, `ir.choice`) ---------------------------------------------- */

/* A node of IR class `kind` with its slots `names` (`count` of them) set to `values` (new
 * references taken, NULL for None), made as its dataclass would make it (none of these classes has
 * a `__post_init__`); NULL with an exception set where the class has no such slots. */
static PyObject *make_node(int kind, const int *names, PyObject *const *values, int count) {
    PyTypeObject *type = (PyTypeObject *)ir_types[kind];
    for (int i = 0; i < count; i++) {
        if (ir_offsets[kind][names[i]] < 0) return cm_bad("IR class without the expected slots"), NULL;
    }
    PyObject *node = type->tp_alloc(type, 0);
    if (!node) return NULL;
    for (int i = 0; i < count; i++) {
        *(PyObject **)((char *)node + ir_offsets[kind][names[i]]) = Py_NewRef(values[i] ? values[i] : Py_None);
    }
    return node;
}

static PyObject *literal_of(PyObject *value) {
    int names[1] = {A_VALUE};
    return make_node(IR_LITERAL, names, &value, 1);
}

/* The bytes of a Literal (borrowed), or NULL with an error. */
static PyObject *literal_bytes(PyObject *lit) {
    PyObject *value = slot_value(lit, IR_LITERAL, A_VALUE);
    if (!value || !PyBytes_Check(value)) return cm_bad("Literal: a value of bytes in its slot expected"), NULL;
    return value;
}

/* Append `part` to `flat` (a list) as `ir.seq` does: an empty literal dropped, a literal after a
 * literal fused with it. */
static int seq_append(PyObject *flat, PyObject *part) {
    if ((PyObject *)Py_TYPE(part) != ir_types[IR_LITERAL]) return PyList_Append(flat, part);
    PyObject *value = literal_bytes(part);
    if (!value) return -1;
    if (!PyBytes_GET_SIZE(value)) return 0;
    Py_ssize_t n = PyList_GET_SIZE(flat);
    PyObject *last = n ? PyList_GET_ITEM(flat, n - 1) : NULL;
    if (!last || (PyObject *)Py_TYPE(last) != ir_types[IR_LITERAL]) return PyList_Append(flat, part);
    PyObject *before = literal_bytes(last);
    if (!before) return -1;
    PyObject *joined = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(before) + PyBytes_GET_SIZE(value));
    if (!joined) return -1;
    memcpy(PyBytes_AS_STRING(joined), PyBytes_AS_STRING(before), (size_t)PyBytes_GET_SIZE(before));
    memcpy(PyBytes_AS_STRING(joined) + PyBytes_GET_SIZE(before), PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
    PyObject *fused = literal_of(joined);
    Py_DECREF(joined);
    if (!fused) return -1;
    return PyList_SetItem(flat, n - 1, fused);  /* (steals `fused`) */
}

/* The node a list of parts makes: its only part, or a `kind` node (Sequence, Choice) of them all. */
static PyObject *node_of_parts(int kind, int attribute, PyObject *parts) {
    if (PyList_GET_SIZE(parts) == 1) return Py_NewRef(PyList_GET_ITEM(parts, 0));
    PyObject *items = PyList_AsTuple(parts);
    if (!items) return NULL;
    int names[2] = {attribute, A_HASH};
    PyObject *values[2] = {items, NULL};
    PyObject *node = make_node(kind, names, values, 2);
    Py_DECREF(items);
    return node;
}

/* ir_seq(items) -> Expr: `grammar.ir.seq` of the tuple `items` (nested sequences spliced one level,
 * adjacent literals fused, empty ones dropped), the same nodes made in C. */
PyObject *cm_ir_seq(PyObject *self, PyObject *items) {
    (void)self;
    if (!ir_types[0]) return cm_bad("ir_seq: set_ir was not called"), NULL;
    if (!PyTuple_Check(items)) return PyErr_SetString(PyExc_TypeError, "ir_seq: a tuple of expressions"), NULL;
    PyObject *flat = PyList_New(0);
    if (!flat) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(items); i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        if ((PyObject *)Py_TYPE(item) == ir_types[IR_SEQUENCE]) {
            PyObject *parts = ir_attr(item, A_ITEMS);
            int failed = !parts || !PyTuple_Check(parts);
            for (Py_ssize_t k = 0; !failed && k < PyTuple_GET_SIZE(parts); k++) {
                failed = seq_append(flat, PyTuple_GET_ITEM(parts, k)) != 0;
            }
            Py_XDECREF(parts);
            if (failed) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Sequence.items: a tuple expected");
                Py_DECREF(flat);
                return NULL;
            }
        } else if (seq_append(flat, item)) {
            Py_DECREF(flat);
            return NULL;
        }
    }
    PyObject *made = node_of_parts(IR_SEQUENCE, A_ITEMS, flat);
    Py_DECREF(flat);
    return made;
}

/* Whether two expressions are equal as their dataclasses' `__eq__` says (1, 0, -1 on error),
 * without calling it: nodes of different classes are not (each `__eq__` declines, then identity
 * decides), and nodes of one class compare their fields, expressions by this and others (bytes,
 * names, ranges, counts) as Python does. The small choices' duplicate scan compared each pair
 * through Python. */
static int ir_equal(PyObject *a, PyObject *b, int depth) {
    if (a == b) return 1;
    int kind = ir_kind_of(a), other = ir_kind_of(b);
    if (kind >= 0 && other >= 0 && kind != other) return 0;
    if (kind < 0 || other < 0 || depth > MAX_EXPR_DEPTH) return PyObject_RichCompareBool(a, b, Py_EQ);
    static const int fields[IR_KINDS][3] = {
        [IR_LITERAL] = {A_VALUE, -1, -1}, [IR_CHARCLASS] = {A_RANGES, A_NEGATED, -1}, [IR_BYTECLASS] = {A_RANGES, -1, -1},
        [IR_RULEREF] = {A_NAME, -1, -1}, [IR_TERMINALREF] = {A_NAME, -1, -1}, [IR_SEQUENCE] = {A_ITEMS, -1, -1},
        [IR_CHOICE] = {A_ALTERNATIVES, -1, -1}, [IR_REPEAT] = {A_ITEM, A_MIN, A_MAX}};
    for (int f = 0; f < 3 && fields[kind][f] >= 0; f++) {
        PyObject *x = slot_value(a, kind, fields[kind][f]), *y = slot_value(b, kind, fields[kind][f]);
        if (!x || !y) return PyObject_RichCompareBool(a, b, Py_EQ);  /* (not plain slots: Python decides) */
        int same;
        if (fields[kind][f] == A_ITEM) {
            same = ir_equal(x, y, depth + 1);
        } else if ((kind == IR_SEQUENCE || kind == IR_CHOICE) && PyTuple_Check(x) && PyTuple_Check(y)) {
            same = PyTuple_GET_SIZE(x) == PyTuple_GET_SIZE(y);
            for (Py_ssize_t i = 0; same == 1 && i < PyTuple_GET_SIZE(x); i++) {
                same = ir_equal(PyTuple_GET_ITEM(x, i), PyTuple_GET_ITEM(y, i), depth + 1);
            }
        } else {
            same = PyObject_RichCompareBool(x, y, Py_EQ);
        }
        if (same != 1) return same;
    }
    return 1;
}

/* ir_choice(alternatives, small) -> Expr: `grammar.ir.choice` of the tuple `alternatives` (nested
 * choices spliced one level, repeats dropped in order: by equality where there are at most `small`
 * parts, by hashing beyond), the same nodes made in C. */
PyObject *cm_ir_choice(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *alternatives;
    Py_ssize_t small;
    if (!PyArg_ParseTuple(args, "O!n", &PyTuple_Type, &alternatives, &small)) return NULL;
    if (!ir_types[0]) return cm_bad("ir_choice: set_ir was not called"), NULL;
    PyObject *parts = PyList_New(0), *unique = NULL, *made = NULL;
    if (!parts) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(alternatives); i++) {
        PyObject *alt = PyTuple_GET_ITEM(alternatives, i);
        if ((PyObject *)Py_TYPE(alt) == ir_types[IR_CHOICE]) {
            PyObject *inner = tuple_attr(alt, A_ALTERNATIVES);
            int failed = !inner;
            for (Py_ssize_t k = 0; !failed && k < PyTuple_GET_SIZE(inner); k++) {
                failed = PyList_Append(parts, PyTuple_GET_ITEM(inner, k)) != 0;
            }
            Py_XDECREF(inner);
            if (failed) goto done;
        } else if (PyList_Append(parts, alt)) {
            goto done;
        }
    }
    Py_ssize_t n = PyList_GET_SIZE(parts);
    if (n > small) {  /* (dict.fromkeys: the first of equal parts kept, in order) */
        PyObject *seen = PyDict_New();
        if (!seen) goto done;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (PyDict_SetDefault(seen, PyList_GET_ITEM(parts, i), Py_None) == NULL) {
                Py_DECREF(seen);
                goto done;
            }
        }
        unique = PyDict_Keys(seen);
        Py_DECREF(seen);
    } else {
        unique = PyList_New(0);
        for (Py_ssize_t i = 0; unique && i < n; i++) {
            PyObject *part = PyList_GET_ITEM(parts, i);
            int found = 0;
            for (Py_ssize_t k = 0; !found && k < PyList_GET_SIZE(unique); k++) {
                found = ir_equal(PyList_GET_ITEM(unique, k), part, 0);
            }
            if (found < 0 || (!found && PyList_Append(unique, part))) Py_CLEAR(unique);
        }
    }
    if (!unique) goto done;
    made = node_of_parts(IR_CHOICE, A_ALTERNATIVES, unique);
done:
    Py_XDECREF(unique);
    Py_DECREF(parts);
    return made;
}
