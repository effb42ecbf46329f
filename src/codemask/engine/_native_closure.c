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

#include "_native.h"


static void ctx_free(Ctx *c) {
    if (!c) return;
    cm_map_free(&c->seen);
    cm_map_free(&c->scan);
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
    if (cm_map_init(&c->seen, 6) || cm_map_init(&c->scan, 4) || cm_u64_init(&c->visited, 6)) {
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
Ctx *cm_ctx_take(Interner *x) {
    Ctx *c = x->spare;
    if (c) {
        x->spare = NULL;
        return c;
    }
    return ctx_new(x->alphabet);
}

void cm_ctx_give(Interner *x, Ctx *c) {
    if (x->spare) {
        ctx_free(c);
    } else {
        x->spare = c;
    }
}

static void ctx_drop_sets(Ctx *c) {
    c->entry_count = 0;
}

Py_ssize_t cm_as_id(PyObject *found) {
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
uint64_t cm_node_hash(int32_t q, const int32_t *ps, Py_ssize_t n) {
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
    uint64_t h = cm_node_hash(q, ps, n);
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
        if (cm_map_put(&c->scan, q, (int32_t)c->entry_count)) return -1;
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

/* The merged node of one scanning entry: `node(q, tuple(sorted(parents)))`. */
static Py_ssize_t scan_node(Interner *x, Scan *e) {
    if (!e->merged) return e->first; /* one node waits here: it is its own merged node */
    int32_t *ids = e->parents.data;
    Py_ssize_t n = e->parents.size, k = n ? 1 : 0;
    cm_sort_int32(ids, n);
    for (Py_ssize_t i = 1; i < n; i++) {
        if (ids[i] != ids[k - 1]) ids[k++] = ids[i];
    }
    return node(x, e->q, ids, k, -1);
}

/* The core's table, flags and has_stacks held with room for `states` states: as held, unless
 * `ParserCore._grow` rebound them (it says so: `arrays_moved`), else read again from the core
 * (three attribute lookups, which were a tenth of interning a state). */
int cm_core_arrays(Interner *x, PyObject *core, Py_ssize_t states) {
    if (!x->arrays_moved && x->held_table.array && x->held_flags.array && x->held_has_stacks.array &&
        x->held_table.view.len >= states * x->alphabet * (Py_ssize_t)sizeof(int32_t) &&
        x->held_flags.view.len >= states && x->held_has_stacks.view.len >= states)
        return 0;
    if (cm_held_view(&x->held_table, core, "core", "table", sizeof(int32_t), states * x->alphabet) ||
        cm_held_view(&x->held_flags, core, "core", "flags", 1, states) ||
        cm_held_view(&x->held_has_stacks, core, "core", "has_stacks", 1, states))
        return -1;
    x->arrays_moved = 0;
    return 0;
}

/* The new state's entries in the per-state arrays, grown first if needed (`ParserCore._grow`). */
static int mark_state(Interner *x, PyObject *core, Py_ssize_t id, int flag, int has_stacks) {
    if (cm_core_arrays(x, core, 0)) return -1;
    if (id >= x->held_table.view.len / ((Py_ssize_t)sizeof(int32_t) * x->alphabet) ||
        id >= x->held_flags.view.len || id >= x->held_has_stacks.view.len) {
        PyObject *done = PyObject_CallMethod(core, "_grow", NULL);
        if (!done) return -1;
        Py_DECREF(done); /* (`_grow` calls `arrays_moved`) */
    }
    /* (rows are written only here, as their state is interned: the table is reserved untouched) */
    if (cm_core_arrays(x, core, id + 1)) return -1;
    int32_t *row = (int32_t *)x->held_table.view.buf + id * x->alphabet;
    for (Py_ssize_t symbol = 0; symbol < x->alphabet; symbol++) row[symbol] = UNKNOWN;
    ((uint8_t *)x->held_flags.view.buf)[id] = (uint8_t)flag;
    ((uint8_t *)x->held_has_stacks.view.buf)[id] = (uint8_t)has_stacks;
    return 0;
}

static uint64_t state_hash(const int32_t *ids, Py_ssize_t count, int flag) {
    uint64_t h = 0xCBF29CE484222325ull ^ (uint64_t)flag;
    for (Py_ssize_t i = 0; i < count; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001B3ull;
    return h * 0x9E3779B97F4A7C15ull;
}

/* The slot of state (ids, flag) in `st_slots`: where it is, or the empty slot where it would go. */
static size_t state_slot(const Interner *x, const int32_t *ids, Py_ssize_t count, int flag) {
    size_t mask = ((size_t)1 << x->st_slot_bits) - 1, i = (size_t)(state_hash(ids, count, flag) >> (64 - x->st_slot_bits));
    for (;; i = (i + 1) & mask) {
        int32_t s = x->st_slots[i];
        if (s < 0 || (x->st_len[s] == count && x->st_flag[s] == flag &&
                      !memcmp(x->st_ids + x->st_at[s], ids, (size_t)count * sizeof(int32_t))))
            return i;
    }
}

/* Twice the slots, every state placed again. */
static int grow_state_slots(Interner *x) {
    int bits = x->st_slots ? x->st_slot_bits + 1 : 10;
    int32_t *slots = (int32_t *)malloc(((size_t)1 << bits) * sizeof(int32_t));
    if (!slots) return PyErr_NoMemory(), -1;
    memset(slots, 0xFF, ((size_t)1 << bits) * sizeof(int32_t));
    free(x->st_slots);
    x->st_slots = slots;
    x->st_slot_bits = bits;
    for (Py_ssize_t s = 0; s < x->st_count; s++) {
        x->st_slots[state_slot(x, x->st_ids + x->st_at[s], x->st_len[s], x->st_flag[s])] = (int32_t)s;
    }
    return 0;
}

/* Room for one more state and `count` more node ids in the index. */
static int state_room(Interner *x, Py_ssize_t count) {
    if (x->st_count == x->st_cap) {
        Py_ssize_t cap = x->st_cap ? 2 * x->st_cap : 1024;
        int64_t *at = (int64_t *)realloc(x->st_at, (size_t)cap * sizeof(int64_t));
        if (at) x->st_at = at;
        int32_t *len = at ? (int32_t *)realloc(x->st_len, (size_t)cap * sizeof(int32_t)) : NULL;
        if (len) x->st_len = len;
        uint8_t *flag = len ? (uint8_t *)realloc(x->st_flag, (size_t)cap) : NULL;
        if (!flag) return PyErr_NoMemory(), -1;
        x->st_flag = flag;
        x->st_cap = cap;
    }
    if (x->st_ids_size + count > x->st_ids_cap) {
        Py_ssize_t cap = x->st_ids_cap ? 2 * x->st_ids_cap : 4096;
        while (cap < x->st_ids_size + count) cap *= 2;
        int32_t *ids = (int32_t *)realloc(x->st_ids, (size_t)cap * sizeof(int32_t));
        if (!ids) return PyErr_NoMemory(), -1;
        x->st_ids = ids;
        x->st_ids_cap = cap;
    }
    return 0;
}

/* `ParserCore._intern_state` of the sorted node ids: found in the C index, or made (its tuple and
 * flag appended to the core's lists, its row and flags marked). */
static int32_t intern_state(Interner *x, PyObject *core, const int32_t *ids, Py_ssize_t count, int flag) {
    if ((!x->st_slots && grow_state_slots(x)) || state_room(x, count)) return FAILED;
    size_t slot = state_slot(x, ids, count, flag);
    if (x->st_slots[slot] >= 0) return x->st_slots[slot];
    Py_ssize_t id = x->st_count;
    if (id != PyList_GET_SIZE(x->state_stacks)) return cm_bad("the core's state lists changed outside its interner"), FAILED;
    if (id >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many parser states");
        return FAILED;
    }
    PyObject *stacks = cm_int_tuple(ids, count);
    int failed = !stacks || PyList_Append(x->state_stacks, stacks) ||
                 PyList_Append(x->state_flag, flag ? Py_True : Py_False);
    Py_XDECREF(stacks);
    if (failed) return FAILED;
    memcpy(x->st_ids + x->st_ids_size, ids, (size_t)count * sizeof(int32_t));
    x->st_at[id] = x->st_ids_size;
    x->st_len[id] = (int32_t)count;
    x->st_flag[id] = (uint8_t)(flag != 0);
    x->st_ids_size += count;
    x->st_slots[slot] = (int32_t)id;
    x->st_count++;
    if (2 * x->st_count > ((Py_ssize_t)1 << x->st_slot_bits) && grow_state_slots(x)) return FAILED;
    return mark_state(x, core, id, flag, count > 0) ? FAILED : (int32_t)id;
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
    if (cm_u64_put(&c->visited, key, 0)) return -1;
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
    cm_map_clear(&c->seen);
    cm_map_clear(&c->scan);
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
        if (cm_map_put(&c->seen, s, 0)) goto done;
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
    cm_sort_int32(c->ids.data, c->ids.size);
    result = intern_state(x, core, c->ids.data, c->ids.size, flag);
done:
    ctx_drop_sets(c);
    return result;
}

/* Group the symbols by their column of the tops' transition rows, classes numbered in order of
 * their first symbol; returns the number of classes. Runs of symbols with the same column (byte
 * ranges) are the common case: a first pass finds where a column differs from the one before, and
 * only those columns are hashed and looked up (hashing every column of every top was most of a
 * row's filling). */
static Py_ssize_t group_columns(const Interner *x, Ctx *c, const int32_t *tops, Py_ssize_t count) {
    const int32_t *trans = (const int32_t *)x->trans.buf;
    Py_ssize_t alphabet = x->alphabet;
    if (alphabet < 1) return 0;
    memset(c->differs, 0, (size_t)alphabet);
    c->differs[0] = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        const int32_t *row = trans + (Py_ssize_t)tops[i] * alphabet;
        for (Py_ssize_t a = 1; a < alphabet; a++) c->differs[a] |= row[a] != row[a - 1];
    }
    size_t mask = ((size_t)1 << c->slot_bits) - 1;
    memset(c->slots, 0xFF, (mask + 1) * sizeof(int32_t));
    Py_ssize_t classes = 0;
    for (Py_ssize_t a = 0; a < alphabet; a++) {
        if (!c->differs[a]) {
            c->class_of[a] = c->class_of[a - 1];
            continue;
        }
        uint64_t h = 0x2545F4914F6CDD1Dull;
        for (Py_ssize_t i = 0; i < count; i++) h = (h ^ (uint32_t)trans[(Py_ssize_t)tops[i] * alphabet + a]) * 0x100000001B3ull;
        c->hash[a] = h;
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
    if (cm_core_arrays(x, core, state + 1)) return -1;
    int32_t *out = (int32_t *)x->held_table.view.buf + state * x->alphabet;
    for (Py_ssize_t a = 0; a < x->alphabet; a++) out[a] = row ? row[a] : fill;
    return 0;
}

/* `ParserCore._fill_row`: one closure per distinct column of the tops' transition rows. */
int cm_fill_row(Interner *x, PyObject *core, Ctx *c, Py_ssize_t state) {
    if (state < 0 || state >= x->st_count) return index_error("parser state out of range");
    Py_ssize_t count = x->st_len[state];
    if (!count) return write_row(x, core, state, NULL, DEAD);
    int32_t *tops = (int32_t *)malloc((size_t)count * sizeof(int32_t));
    int32_t *nodes = (int32_t *)malloc((size_t)count * sizeof(int32_t));
    int status = -1;
    if (!tops || !nodes) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n;
        nodes[i] = x->st_ids[x->st_at[state] + i];
        if (node_at(x, nodes[i], &tops[i], &n)) goto done;
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

/* The parser state of one node at RTN state `q` over the single bottom `parent` (< 0), as a row
 * fill would reach it: where a walk that followed the RTN itself through call-free states
 * (`_native_position.c`) comes to a state that needs the parser. FAILED with an exception set. */
int32_t cm_bottom_state(Interner *x, PyObject *core, int32_t q, int32_t parent) {
    if (q < 0 || q >= x->states || parent >= 0) return cm_bad("bottom state: RTN state or parent out of range"), FAILED;
    Ctx *c = cm_ctx_take(x);
    if (!c) return FAILED;
    Py_ssize_t s = node(x, q, &parent, 1, -1);
    int32_t one = (int32_t)s;
    int32_t result = s < 0 ? FAILED : closure(x, core, c, &one, 1);
    cm_ctx_give(x, c);
    return result;
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
    free(x->st_ids);
    free(x->st_len);
    free(x->st_slots);
    free(x->st_at);
    free(x->st_flag);
    free(x->chain_kind);
    ctx_free(x->spare);
    cm_held_free(&x->held_table);
    cm_held_free(&x->held_flags);
    cm_held_free(&x->held_has_stacks);
    Py_TYPE(x)->tp_free((PyObject *)x);
}

/* A malloc'd copy of a buffer of `count` items of `itemsize` bytes (ValueError if its size differs). */
void *cm_copy_array(Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count, const char *name) {
    if (cm_need(view, itemsize, count, name)) return NULL;
    void *copy = malloc(count ? (size_t)(itemsize * count) : 1);
    if (!copy) return PyErr_NoMemory();
    memcpy(copy, view->buf, (size_t)(itemsize * count));
    return copy;
}

/* Whether any of `count` values lies outside -1 .. `states` - 1. Branch-free and, with GCC, built
 * with its vectoriser (which -O2 leaves off): a schema's table is 0.5-5 million entries, checked at
 * every compile (0.4 ms for half a million one by one, 0.1 ms vectorised). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
int cm_any_out_of_range(const int32_t *values, Py_ssize_t count, Py_ssize_t states) {
    const uint32_t limit = (uint32_t)states; /* (value + 1 must lie in 0 .. states) */
    const Py_ssize_t block = 4096;
    for (Py_ssize_t lo = 0; lo < count; lo += block) {
        Py_ssize_t hi = lo + block < count ? lo + block : count;
        uint32_t bad = 0;
        for (Py_ssize_t i = lo; i < hi; i++) bad |= (uint32_t)((uint32_t)values[i] + 1u > limit);
        if (bad) return 1;
    }
    return 0;
}

static int check_rtn(Interner *x, Py_ssize_t calls) {
    if (x->call_lo[0] != 0 || x->call_lo[x->states] != calls) return cm_bad("call_lo: not the bounds of the calls");
    for (Py_ssize_t q = 0; q < x->states; q++) {
        if (x->call_lo[q] > x->call_lo[q + 1]) return cm_bad("call_lo: not increasing");
    }
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (x->callee[k] < 0 || x->callee[k] >= x->states || x->ret[k] < 0 || x->ret[k] >= x->states)
            return cm_bad("call to an RTN state out of range");
    }
    if (cm_any_out_of_range((const int32_t *)x->trans.buf, x->states * x->alphabet, x->states))
        return cm_bad("trans: a transition to an RTN state out of range");
    return 0;
}

static PyObject *interner_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"trans", "alphabet", "scanning", "accepting", "call_lo", "callee", "ret", "tail",
                            "state_stacks", "state_flag", "max_stacks", "lazy", "waits", "nullable",
                            "first", "checked", NULL};
    Py_buffer v[9];
    memset(v, 0, sizeof(v));
    int checked = 0; /* (the same arrays passed an earlier interner's check: `ParserCore(like=...)`) */
    static uint64_t serials = 0;
    Interner *x = (Interner *)type->tp_alloc(type, 0);
    if (!x) return NULL;
    x->serial = ++serials;
    x->arrays_moved = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*ny*y*y*y*y*y*O!O!npy*y*y*|p", names, &x->trans, &x->alphabet,
                                     &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &PyList_Type, &x->state_stacks,
                                     &PyList_Type, &x->state_flag, &x->max_stacks,
                                     &x->lazy, &v[6], &v[7], &v[8], &checked)) {
        x->state_stacks = x->state_flag = NULL;
        Py_DECREF(x);
        return NULL;
    }
    Py_INCREF(x->state_stacks);
    Py_INCREF(x->state_flag);
    x->states = v[0].len;
    Py_ssize_t calls = v[3].len / (Py_ssize_t)sizeof(int32_t);
    int failed = 1;
    if (PyList_GET_SIZE(x->state_stacks) || PyList_GET_SIZE(x->state_flag)) {
        cm_bad("state_stacks, state_flag: a new core's empty lists");
        goto done;
    }
    if (x->alphabet < 1 || x->trans.len != x->states * x->alphabet * (Py_ssize_t)sizeof(int32_t)) {
        cm_bad("trans: not [states, alphabet] int32");
        goto done;
    }
    if (!(x->scanning = (uint8_t *)cm_copy_array(&v[0], 1, x->states, "scanning")) ||
        !(x->accepting = (uint8_t *)cm_copy_array(&v[1], 1, x->states, "accepting")) ||
        !(x->call_lo = (int32_t *)cm_copy_array(&v[2], sizeof(int32_t), x->states + 1, "call_lo")) ||
        !(x->callee = (int32_t *)cm_copy_array(&v[3], sizeof(int32_t), calls, "callee")) ||
        !(x->ret = (int32_t *)cm_copy_array(&v[4], sizeof(int32_t), calls, "ret")) ||
        !(x->tail = (uint8_t *)cm_copy_array(&v[5], 1, calls, "tail")) || (!checked && check_rtn(x, calls)))
        goto done;
    x->first_words = (x->alphabet + 63) / 64;
    if (!(x->waits = (uint8_t *)cm_copy_array(&v[6], 1, x->states, "waits")) ||
        !(x->nullable = (uint8_t *)cm_copy_array(&v[7], 1, x->states, "nullable")) ||
        !(x->first = (uint64_t *)cm_copy_array(&v[8], sizeof(uint64_t), x->states * x->first_words, "first")))
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
    if (!read_ids(stacks, &ids) && (c = cm_ctx_take(x))) {
        result = closure(x, core, c, ids.data, ids.size);
        cm_ctx_give(x, c);
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
            cm_bad("parents must be sorted, without repeats");
            goto done;
        }
        ids[i] = (int32_t)parent;
    }
    id = node(x, (int32_t)q, ids, n, -1);
done:
    free(ids);
    return id < 0 ? NULL : PyLong_FromSsize_t(id);
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
    PyObject *parents = cm_int_tuple(ids, x->npn[s]);
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
int32_t cm_step_state(Interner *x, PyObject *core, Py_ssize_t state, Py_ssize_t symbol) {
    PyObject *stacks = PyList_GET_ITEM(x->state_stacks, state);
    if (!PyTuple_Check(stacks)) {
        PyErr_SetString(PyExc_TypeError, "state stacks must be tuples");
        return FAILED;
    }
    Ctx *c = cm_ctx_take(x);
    if (!c) return FAILED;
    const int32_t *trans = (const int32_t *)x->trans.buf;
    int32_t result = FAILED;
    c->moved.size = 0;
    cm_u64_clear(&c->visited);
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
    cm_ctx_give(x, c);
    return result;
}

static PyObject *interner_arrays_moved(Interner *x, PyObject *Py_UNUSED(ignored)) {
    x->arrays_moved = 1;
    Py_RETURN_NONE;
}

static PyObject *interner_step(Interner *x, PyObject *args) {
    PyObject *core;
    Py_ssize_t state, symbol;
    if (!PyArg_ParseTuple(args, "Onn", &core, &state, &symbol)) return NULL;
    if (state < 0 || state >= PyList_GET_SIZE(x->state_stacks)) return index_error("parser state out of range"), NULL;
    if (symbol < 0 || symbol >= x->alphabet) return index_error("symbol out of range"), NULL;
    int32_t result = cm_step_state(x, core, state, symbol);
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
    if (!read_ids(states, &ids) && (c = cm_ctx_take(x))) {
        status = 0;
        for (Py_ssize_t i = 0; i < ids.size && !status; i++) status = cm_fill_row(x, core, c, ids.data[i]);
        cm_ctx_give(x, c);
    }
    free(ids.data);
    if (status) return NULL;
    Py_RETURN_NONE;
}

/* intern(core, stacks, flag) -> state: `ParserCore._intern_state` of the sorted tuple of node ids
 * `stacks` (the Python closure's, where the extension is switched off for a core that has one). */
static PyObject *interner_intern(Interner *x, PyObject *args) {
    PyObject *core, *stacks;
    int flag;
    if (!PyArg_ParseTuple(args, "OO!p", &core, &PyTuple_Type, &stacks, &flag)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(stacks);
    int32_t *ids = (int32_t *)malloc((size_t)(count ? count : 1) * sizeof(int32_t));
    if (!ids) return PyErr_NoMemory();
    int32_t state = FAILED;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t id = PyLong_AsSsize_t(PyTuple_GET_ITEM(stacks, i));
        if (id == -1 && PyErr_Occurred()) goto done;
        if (id < 0 || id >= x->ncount || (i && id <= ids[i - 1])) {
            index_error("stacks: sorted node ids of this core expected");
            goto done;
        }
        ids[i] = (int32_t)id;
    }
    state = intern_state(x, core, ids, count, flag);
done:
    free(ids);
    return state == FAILED ? NULL : PyLong_FromLong(state);
}

static PyMethodDef interner_methods[] = {
    {"intern", (PyCFunction)interner_intern, METH_VARARGS,
     "intern(core, stacks, flag) -> state: ParserCore._intern_state of a sorted tuple of node ids"},
    {"closure", (PyCFunction)interner_closure, METH_VARARGS,
     "closure(core, stacks) -> state: ParserCore.closure of the node ids `stacks`"},
    {"node", (PyCFunction)interner_node, METH_VARARGS,
     "node(q, parents) -> id: ParserCore.node, the stack node q on top of the sorted tuple of node ids parents"},
    {"fill_rows", (PyCFunction)interner_fill_rows, METH_VARARGS,
     "fill_rows(core, states): ParserCore._fill_row of each state, in order"},
    {"arrays_moved", (PyCFunction)interner_arrays_moved, METH_NOARGS,
     "arrays_moved(): the core's table, flags and has_stacks were rebound (ParserCore._grow): take them again"},
    {"step", (PyCFunction)interner_step, METH_VARARGS,
     "step(core, state, symbol) -> state: ParserCore._compute_step (the closure of the moved stacks, or DEAD)"},
    {"state_of", (PyCFunction)interner_state_of, METH_O, "state_of(node) -> the node's RTN state"},
    {"parents_of", (PyCFunction)interner_parents_of, METH_O, "parents_of(node) -> the node's parents, a sorted tuple"},
    {"states_of", (PyCFunction)interner_states_of, METH_O, "states_of(nodes) -> [the RTN state of each node]"},
    {"num_nodes", (PyCFunction)interner_num_nodes, METH_NOARGS, "num_nodes() -> how many nodes are interned"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject cm_InternerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.Interner",
    .tp_basicsize = sizeof(Interner),
    .tp_dealloc = (destructor)interner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Interner(trans, alphabet, scanning, accepting, call_lo, callee, ret, tail, "
              "state_stacks, state_flag, max_stacks, lazy, waits, nullable, first, checked=False): a ParserCore's stack "
              "nodes and closures in C",
    .tp_methods = interner_methods,
    .tp_new = interner_new,
};
