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

#include "_native.h"

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
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!On", names, &cm_SymbolStepsType, &steps, &split, &w->limit)) {
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
        cm_u64_init(&w->young, 12) || cm_u64_init(&w->old, 4) || cm_u64_init(&w->afters, 12) || cm_u64_init(&w->lids, 12) ||
        cm_u64_init(&w->splits, 12) || cm_u64_init(&w->info_of, 10) || cm_u64_init(&w->combos, 12)) {
        Py_DECREF(w);
        return NULL;
    }
    return (PyObject *)w;
}

static int32_t rw_after(ResidualWalker *w, int32_t pid, int32_t end_class) {
    uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)end_class;
    int32_t found = u64_get(&w->afters, key);
    if (found != UNKNOWN) return found;
    found = cm_ss_after(w->steps, pid, end_class);
    if (found == FAILED || cm_u64_put(&w->afters, key, found)) return FAILED;
    return found;
}

static int32_t rw_fresh(ResidualWalker *w, int32_t pid) {
    int32_t found = u64_get(&w->lids, (uint64_t)(uint32_t)pid);
    if (found != UNKNOWN) return found;
    found = cm_ss_fresh(w->steps, pid);
    if (found == FAILED || cm_u64_put(&w->lids, (uint64_t)(uint32_t)pid, found)) return FAILED;
    return found;
}

/* A Python int attribute of `obj` (a set's index, a child's end class) as int32, or FAILED. */
static int32_t int_attr(PyObject *obj, PyObject *name) {
    return cm_state_result(PyObject_GetAttr(obj, name));
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
        if (!PyErr_Occurred()) cm_bad("a split's children and pairs must be lists");
        return -1;
    }
    if (!PyBytes_Check(flags) || PyTuple_GET_SIZE(children) != PyTuple_GET_SIZE(pairs))
        return cm_bad("a split's flags must be bytes, and its pairs one per child");
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
        if (!PyTuple_Check(child) || PyTuple_GET_SIZE(child) != 4) return cm_bad("a child must be a 4-tuple");
        if (!PyBytes_Check(bytes) || PyBytes_GET_SIZE(bytes) % (2 * (Py_ssize_t)sizeof(int64_t)))
            return cm_bad("a child's pairs must be bytes of int64 pairs");
        Py_INCREF(PyTuple_GET_ITEM(child, 0));
        info->end_class[i] = cm_state_result(PyTuple_GET_ITEM(child, 0));
        info->tails[i] = PyTuple_GET_ITEM(child, 2);
        info->tail_index[i] = info->end_class[i] == FAILED ? FAILED : int_attr(info->tails[i], w->s_index);
        if (info->tail_index[i] == FAILED) return -1;
        if (info->end_class[i] < 0 || info->tail_index[i] < 0) return cm_bad("negative end class or set index");
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
        cm_u64_put(&w->info_of, key, (int32_t)w->ninfos)) {
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
    if (info && cm_u64_put(&w->splits, key, info->position)) return NULL;
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
    if (found != UNKNOWN && cm_u64_put(&w->young, key, found)) return FAILED;
    return found;
}

/* Keep `result` for `key`; when the young generation is full it becomes the old one. */
static int rw_keep(ResidualWalker *w, uint64_t key, int32_t result) {
    if (cm_u64_put(&w->young, key, result)) return -1;
    if (w->young.used < w->limit) return 0;
    U64Map empty;
    if (cm_u64_init(&empty, 12)) return -1;
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
    return cm_node_hash(position, children, n);
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
    if (cm_u64_put(&w->combos, h, (int32_t)w->combo_size)) return FAILED;
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
    cm_u64_clear(&w->young);
    cm_u64_clear(&w->old);
    cm_u64_clear(&w->combos);
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

PyTypeObject cm_ResidualWalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.ResidualWalker",
    .tp_basicsize = sizeof(ResidualWalker),
    .tp_dealloc = (destructor)rw_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ResidualWalker(steps, split, limit): LexerMaskComputer._residuals_accepted in C, hash-consed",
    .tp_methods = rw_methods,
    .tp_getset = rw_getset,
    .tp_new = rw_new,
};
