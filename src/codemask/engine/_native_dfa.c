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
 * Its transitions come out as runs of symbols to one target, which `stack_tables` writes as the
 * network's dense rows (`automaton.RunsDFA`).
 * ------------------------------------------------------------------------------------------- */

#include "_native.h"


uint64_t cm_seq_hash(const int32_t *a, Py_ssize_t n) {
    uint64_t h = 0x84222325CBF29CE4ull ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint32_t)a[i]) * 0x100000001B3ull;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 33);
}

void cm_seqmap_free(SeqMap *m) {
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
int32_t cm_seqmap_get(const SeqMap *m, const int32_t *a, Py_ssize_t n, uint64_t h) {
    if (!m->slots) return -1;
    size_t mask = ((size_t)1 << m->bits) - 1, i = (size_t)(h >> (64 - m->bits));
    for (int32_t k; (k = m->slots[i]) >= 0; i = (i + 1) & mask) {
        if (m->hash[k] == h && m->len[k] == n && !memcmp(m->pool.data + m->off[k], a, (size_t)n * sizeof(int32_t)))
            return m->value[k];
    }
    return -1;
}

/* Record the `n` ints at `a` (hash `h`, not in the map yet; `a` must not point into the pool) with `value`. */
int cm_seqmap_put(SeqMap *m, const int32_t *a, Py_ssize_t n, uint64_t h, int32_t value) {
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
        if (src < 0 || src >= states) return cm_bad("NFA edge from a state out of range");
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

/* The DFA state of the epsilon closure of the sorted, distinct NFA states `targets` (`n` of them),
 * interned (with a new transition row) if new; -1 on error. */
static int32_t subset_of_targets(Subsets *d, const int32_t *targets, Py_ssize_t n) {
    uint64_t h = cm_seq_hash(targets, n);
    int32_t found = cm_seqmap_get(&d->closures, targets, n, h);
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
    cm_sort_int32(d->set.data, d->set.size);
    uint64_t hs = cm_seq_hash(d->set.data, d->set.size);
    int32_t id = cm_seqmap_get(&d->subsets, d->set.data, d->set.size, hs);
    if (id < 0) {
        id = (int32_t)d->subsets.count;
        if (id >= d->max_states) {
            PyErr_Format(PyExc_OverflowError, "more than %zd deterministic automaton states", d->max_states);
            return -1;
        }
        if (cm_seqmap_put(&d->subsets, d->set.data, d->set.size, hs, id)) return -1;
        if (buf_push(&d->accepting, d->seen[d->final] == d->gen)) return -1;
    }
    return cm_seqmap_put(&d->closures, targets, n, h, id) ? -1 : id;
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
                return cm_bad("NFA edge with a symbol range or target out of range");
            /* an event: (point, +target + 1 opens / -target - 1 closes) */
            if (buf_push(events, edge[0]) || buf_push(events, edge[2] + 1) || buf_push(events, edge[1] + 1) ||
                buf_push(events, -edge[2] - 1))
                return -1;
        }
        for (int32_t c = d->calls.lo[s]; c < d->calls.lo[s + 1]; c++) {
            const int32_t *call = d->calls.item + 2 * (Py_ssize_t)c; /* rule, target */
            if (call[0] < 0 || call[1] < 0 || call[1] >= d->states) return cm_bad("NFA call out of range");
            if (buf_push(pairs, call[0]) || buf_push(pairs, call[1])) return -1;
        }
    }
    Py_ssize_t count = events->size / 2;
    cm_sort_pairs(events->data, count);
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
        cm_sort_int32(targets->data, targets->size);
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
    cm_sort_pairs(pairs->data, calls);
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

/* Bits `lo`..`hi` (inclusive) of a bit set of uint64 words set, a word at a time (a bit at a time,
 * each one waiting on the last write of its word, was a fifth of the automaton's construction). */
static void set_bit_range(uint64_t *bits, int32_t lo, int32_t hi) {
    int32_t low_word = lo >> 6, high_word = hi >> 6;
    uint64_t from_lo = ~(uint64_t)0 << (lo & 63), to_hi = ~(uint64_t)0 >> (63 - (hi & 63));
    if (low_word == high_word) {
        bits[low_word] |= from_lo & to_hi;
        return;
    }
    bits[low_word] |= from_lo;
    for (int32_t w = low_word + 1; w < high_word; w++) bits[w] = ~(uint64_t)0;
    bits[high_word] |= to_hi;
}

/* The minimal DFA of an NFA of `states` states given as flat int32 lists of `n_eps` epsilon edges
 * (source, target), `n_edges` symbol ranges (source, lo, hi, target) and `n_calls` calls (source,
 * rule, target): (runs, run_lo, accepting, calls, first) bytes, or NULL with an exception set. The
 * transitions are runs (lo, hi, target: int32 triples, a state's from `run_lo[state]` to
 * `run_lo[state + 1]`), not dense rows: a large schema's rules have tens of thousands of states,
 * and their rows of `alphabet` targets are written once, by `stack_tables`, into the network.
 * `first` holds per state the symbols it takes, a bit set of ceil(alphabet / 64) uint64 words
 * (`RTN.follow_bytes` reads them instead of the rows). */
PyObject *cm_dfa_of_nfa(Py_ssize_t states, int start, int final, const int32_t *eps_flat, Py_ssize_t n_eps,
                        const int32_t *edges_flat, Py_ssize_t n_edges, const int32_t *calls_flat,
                        Py_ssize_t n_calls, Py_ssize_t alphabet, Py_ssize_t max_states) {
    PyObject *result = NULL;
    Subsets d;
    memset(&d, 0, sizeof(d));
    IntBuf scratch[4];
    memset(scratch, 0, sizeof(scratch));
    int32_t *open_count = NULL, *alive_map = NULL, *stack = NULL, *tail = NULL, *label = NULL, *head = NULL;
    int32_t *class_at = NULL;
    int32_t *cls = NULL, *order = NULL, *rev_lo = NULL, *rev = NULL;
    uint8_t *alive = NULL, *acc = NULL;
    d.states = states;
    d.alphabet = alphabet;
    d.max_states = max_states;
    d.final = final;
    if (states < 1 || start < 0 || start >= states || final < 0 || final >= states || alphabet < 1 ||
        alphabet > 65536) {
        cm_bad("dfa_of_nfa: states, start, final or alphabet out of range");
        goto done;
    }
    if (group_by_source(eps_flat, n_eps, 2, states, &d.eps) || group_by_source(edges_flat, n_edges, 4, states, &d.edges) ||
        group_by_source(calls_flat, n_calls, 3, states, &d.calls))
        goto done;
    for (Py_ssize_t k = 0; k < n_eps; k++) {
        if (d.eps.item[k] < 0 || d.eps.item[k] >= states) {
            cm_bad("NFA epsilon edge to a state out of range");
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
    /* the kept automaton's transitions, over the symbol intervals between every range's ends:
     * `class_at[b]` marks each range end, then numbers them in order (a symbol's interval is that of
     * the last end at or below it) */
    class_at = (int32_t *)calloc((size_t)alphabet + 2, sizeof(int32_t));
    if (!class_at) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < n; q++) {
        if (!alive[q]) continue;
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) {
            if (alive_map[segs[3 * k + 2]] < 0) continue;
            class_at[segs[3 * k]] = class_at[segs[3 * k + 1] + 1] = 1;
        }
    }
    Py_ssize_t classes = 0;
    for (Py_ssize_t b = 0; b <= alphabet + 1; b++) {
        if (class_at[b]) class_at[b] = (int32_t)classes++;
    }
    Py_ssize_t m = 0, max_rule = -1, cap = 0;
    for (Py_ssize_t c = 0; c < ncalls; c++) {
        if (d.call_out.data[3 * c + 1] > max_rule) max_rule = d.call_out.data[3 * c + 1];
    }
    for (Py_ssize_t q = 0; q < n; q++) {
        if (!alive[q]) continue;
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) {
            if (alive_map[segs[3 * k + 2]] < 0) continue;
            cap += class_at[segs[3 * k + 1] + 1] - class_at[segs[3 * k]];
        }
    }
    cap += ncalls;
    tail = (int32_t *)malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    label = (int32_t *)malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    head = (int32_t *)malloc((size_t)(cap ? cap : 1) * sizeof(int32_t));
    acc = (uint8_t *)malloc((size_t)kept);
    cls = (int32_t *)malloc((size_t)kept * sizeof(int32_t));
    if (!tail || !label || !head || !acc || !cls) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t q = 0; q < n; q++) {
        if (!alive[q]) continue;
        acc[alive_map[q]] = (uint8_t)d.accepting.data[q];
        for (int32_t k = seg_first[q]; k < seg_first[q + 1]; k++) {
            int32_t t = alive_map[segs[3 * k + 2]];
            if (t < 0) continue;
            for (int32_t c = class_at[segs[3 * k]]; c < class_at[segs[3 * k + 1] + 1]; c++) {
                tail[m] = alive_map[q];
                label[m] = c;
                head[m++] = t;
            }
        }
    }
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
    Py_ssize_t words = (alphabet + 63) / 64, run_count = 0;
    for (Py_ssize_t k = 0; k < final_count; k++) {
        int32_t q = kept_state[rep[k]];
        for (int32_t g = seg_first[q]; g < seg_first[q + 1]; g++) run_count += alive_map[segs[3 * g + 2]] >= 0;
    }
    PyObject *runs_out = PyBytes_FromStringAndSize(NULL, run_count * 3 * (Py_ssize_t)sizeof(int32_t));
    PyObject *run_lo_out = PyBytes_FromStringAndSize(NULL, (final_count + 1) * (Py_ssize_t)sizeof(int32_t));
    PyObject *acc_out = PyBytes_FromStringAndSize(NULL, final_count);
    PyObject *first_out = PyBytes_FromStringAndSize(NULL, final_count * words * (Py_ssize_t)sizeof(uint64_t));
    IntBuf calls_out = {0};
    int failed = !runs_out || !run_lo_out || !acc_out || !first_out;
    int32_t *run = failed ? NULL : (int32_t *)PyBytes_AS_STRING(runs_out);
    int32_t *run_lo = failed ? NULL : (int32_t *)PyBytes_AS_STRING(run_lo_out);
    for (Py_ssize_t k = 0; !failed && k < final_count; k++) {
        int32_t q = kept_state[rep[k]];
        uint64_t *bits = (uint64_t *)PyBytes_AS_STRING(first_out) + k * words;
        memset(bits, 0, (size_t)words * sizeof(uint64_t));
        run_lo[k] = (int32_t)((run - (int32_t *)PyBytes_AS_STRING(runs_out)) / 3);
        for (int32_t g = seg_first[q]; g < seg_first[q + 1]; g++) {
            int32_t t = alive_map[segs[3 * g + 2]];
            if (t < 0) continue;
            run[0] = segs[3 * g];
            run[1] = segs[3 * g + 1];
            run[2] = order[cls[t]];
            set_bit_range(bits, run[0], run[1]);
            run += 3;
        }
        PyBytes_AS_STRING(acc_out)[k] = (char)d.accepting.data[q];
    }
    if (!failed) run_lo[final_count] = (int32_t)run_count;
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
        PyObject *calls_bytes = cm_buf_bytes(&calls_out);
        if (calls_bytes) result = PyTuple_Pack(5, runs_out, run_lo_out, acc_out, calls_bytes, first_out);
        Py_XDECREF(calls_bytes);
    }
    free(calls_out.data);
    Py_XDECREF(runs_out);
    Py_XDECREF(run_lo_out);
    Py_XDECREF(acc_out);
    Py_XDECREF(first_out);
done:
    free(class_at);
    for (int i = 0; i < 4; i++) free(scratch[i].data);
    grouped_free(&d.eps);
    grouped_free(&d.edges);
    grouped_free(&d.calls);
    free(d.seen);
    free(d.stack.data);
    free(d.set.data);
    cm_seqmap_free(&d.subsets);
    cm_seqmap_free(&d.closures);
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

/* One rule's dense table (int32, `width` symbols a row) written at row `base` of `into` with `base`
 * added to its targets, and `flags` (per row: 1 where it has a transition) set; -1 with an exception
 * where a target is neither -1 nor one of its rows. The checks are folded into the pass, without a
 * branch per symbol, so that the loop is vectorised. */
static int stack_dense(const int32_t *from, Py_ssize_t rows, Py_ssize_t width, int32_t base, int32_t *into,
                       uint8_t *flags) {
    for (Py_ssize_t r = 0; r < rows; r++) {
        const int32_t *src = from + r * width;
        int32_t *dst = into + r * width;
        int32_t bad = 0, any = 0;
        for (Py_ssize_t a = 0; a < width; a++) {
            int32_t target = src[a];
            bad |= (target >= rows) | (target < -1);
            any |= target >= 0;
            /* (added unsigned: a target `bad` refuses below must not overflow first) */
            dst[a] = target >= 0 ? (int32_t)((uint32_t)target + (uint32_t)base) : target;
        }
        if (bad) return index_error("tables: a target outside its rule's states"), -1;
        flags[r] = (uint8_t)any;
    }
    return 0;
}

/* One rule's transitions as runs (`dfa_of_nfa`: int32 triples lo, hi, target; a row's from
 * `run_lo[row]` to `run_lo[row + 1]`) written as dense rows at row `base` of `into`, as `stack_dense`. */
static int stack_runs(const int32_t *runs, Py_ssize_t run_count, const int32_t *run_lo, Py_ssize_t rows,
                      Py_ssize_t width, int32_t base, int32_t *into, uint8_t *flags) {
    if (run_lo[0] != 0 || run_lo[rows] != run_count)
        return cm_bad("tables: run offsets that do not cover the runs"), -1;
    for (Py_ssize_t r = 0; r < rows; r++) {
        int32_t *dst = into + r * width;
        if (run_lo[r + 1] < run_lo[r] || run_lo[r + 1] > run_count)
            return cm_bad("tables: run offsets out of order"), -1;
        for (Py_ssize_t a = 0; a < width; a++) dst[a] = -1;
        for (int32_t k = run_lo[r]; k < run_lo[r + 1]; k++) {
            int32_t lo = runs[3 * k], hi = runs[3 * k + 1], target = runs[3 * k + 2];
            if (lo < 0 || hi < lo || hi >= width) return cm_bad("tables: a run outside the row"), -1;
            if (target < 0 || target >= rows) return index_error("tables: a target outside its rule's states"), -1;
            for (int32_t s = lo; s <= hi; s++) dst[s] = target + base;
        }
        flags[r] = run_lo[r + 1] > run_lo[r];
    }
    return 0;
}

/* stack_tables(tables, width, out) -> bytes: the rules' automata laid end to end as one table
 * (`automaton.build_rtn`): each table, either dense (int32 bytes, `width` symbols a row, targets
 * numbered within their rule, -1 none) or runs `(runs, run_lo)` as `dfa_of_nfa` makes them, is
 * written into `out` (int32, writable, the sum of their rows) with the rows before it added to every
 * target; returned, per state of `out`, 1 where it has a transition (`RTN.scanning`). One pass over
 * the table, which for a large schema is tens of megabytes; a target that is neither -1 nor a row of
 * its table is an IndexError (`RTN.in_range`). */
PyObject *cm_stack_tables(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tables;
    Py_ssize_t width;
    Py_buffer out = {0};
    if (!PyArg_ParseTuple(args, "O!nw*", &PyList_Type, &tables, &width, &out)) return NULL;
    PyObject *scanning = NULL;
    Py_ssize_t total = 0;
    if (width < 1 || out.len % (width * (Py_ssize_t)sizeof(int32_t))) {
        PyErr_SetString(PyExc_ValueError, "out: whole rows of width int32 expected");
        goto done;
    }
    total = out.len / (width * (Py_ssize_t)sizeof(int32_t));
    if (!(scanning = PyBytes_FromStringAndSize(NULL, total))) goto done;
    uint8_t *flags = (uint8_t *)PyBytes_AS_STRING(scanning);
    int32_t *into = (int32_t *)out.buf;
    Py_ssize_t base = 0;
    const Py_ssize_t row_bytes = width * (Py_ssize_t)sizeof(int32_t);
    for (Py_ssize_t t = 0; t < PyList_GET_SIZE(tables); t++) {
        PyObject *item = PyList_GET_ITEM(tables, t);
        Py_buffer table = {0}, offsets = {0};
        Py_ssize_t rows;
        int failed, is_runs = PyTuple_Check(item);
        if (is_runs) {
            if (PyTuple_GET_SIZE(item) != 2) {
                PyErr_SetString(PyExc_ValueError, "tables: a dense table or (runs, run_lo)");
                goto fail;
            }
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &table, PyBUF_C_CONTIGUOUS)) goto fail;
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 1), &offsets, PyBUF_C_CONTIGUOUS)) {
                PyBuffer_Release(&table);
                goto fail;
            }
            rows = offsets.len / (Py_ssize_t)sizeof(int32_t) - 1;
            failed = table.len % (3 * (Py_ssize_t)sizeof(int32_t)) || offsets.len % (Py_ssize_t)sizeof(int32_t) ||
                     rows < 0;
        } else {
            if (PyObject_GetBuffer(item, &table, PyBUF_C_CONTIGUOUS)) goto fail;
            rows = table.len / row_bytes;
            failed = table.len % row_bytes != 0;
        }
        if (failed || base + rows > total || base + rows > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "tables: whole rows (or runs), no more than out holds");
        } else if (is_runs) {
            failed = stack_runs((const int32_t *)table.buf, table.len / (3 * (Py_ssize_t)sizeof(int32_t)),
                                (const int32_t *)offsets.buf, rows, width, (int32_t)base, into + base * width,
                                flags + base);
        } else {
            failed = stack_dense((const int32_t *)table.buf, rows, width, (int32_t)base, into + base * width,
                                 flags + base);
        }
        PyBuffer_Release(&table);
        PyBuffer_Release(&offsets); /* (a zeroed buffer: nothing to release) */
        if (failed || PyErr_Occurred()) goto fail;
        base += rows;
    }
    if (base != total) {
        PyErr_SetString(PyExc_ValueError, "out: more rows than the tables hold");
        goto fail;
    }
    goto done;
fail:
    Py_CLEAR(scanning);
done:
    PyBuffer_Release(&out);
    return scanning;
}

/* The state of `string_counts`: one rule's states (`lo`..`hi`) paired with the free string's. */
typedef struct {
    const int32_t *ta, *tf, *callee, *ret, *lengths;
    const int64_t *call_lo;
    const uint8_t *acc, *facc;
    Py_ssize_t lo, hi, content, free_states, rules, calls;
    int closing;
    int8_t *kind;          /* per local state: 0 unseen, 1 between characters (open), 2 (counted), 3 within one */
    int32_t *pair, *after; /* within a character: its free state and the state the character ends in;
                            * between characters: whether it may end, and the state after a character */
    int32_t *low, *high;   /* between characters: its counts */
    IntBuf inside;         /* the states within the character being paired */
} Counter;

enum { UNSEEN, OPEN, COUNTED, INSIDE };

/* Pair `a` with free state `f` as `string_counts` does (1: paired; 0: not a counted string). */
static int counter_step(Counter *c, int32_t a, int32_t f, int32_t *after) {
    if (a < c->lo || a >= c->hi) return 0;
    Py_ssize_t i = a - c->lo;
    if (f == c->content) {
        if (*after >= 0 && *after != a) return 0;
        *after = a;
        return 1;
    }
    if (c->kind[i] == UNSEEN) {
        c->kind[i] = INSIDE;
        c->pair[i] = f;
        c->after[i] = -1;
        return buf_push(&c->inside, a) ? -1 : 1;
    }
    if (c->kind[i] != INSIDE || c->pair[i] != f) return 0;
    if (c->after[i] >= 0) {
        if (*after >= 0 && *after != c->after[i]) return 0;
        *after = c->after[i];
    }
    return 1;
}

static int counter_is_end(const Counter *c, int32_t a) {
    if (a < c->lo || a >= c->hi || !c->acc[a] || c->call_lo[a + 1] != c->call_lo[a]) return 0;
    for (int byte = 0; byte < 256; byte++)
        if (c->ta[(Py_ssize_t)a * 256 + byte] >= 0) return 0;
    return 1;
}

/* One character from `a`, a state between characters: whether `a` may end, and in `*after` the state
 * every character read from it ends in (-1: it takes none). 1, 0 (not counted) or -1 (an error). */
static int counter_character(Counter *c, int32_t a, int *ends, int32_t *after) {
    *ends = c->acc[a];
    *after = -1;
    if (*ends && c->closing) return 0;
    int takes = -1, r;
    c->inside.size = 0;
    for (int byte = 0; byte < 256; byte++) {
        int32_t next_a = c->ta[(Py_ssize_t)a * 256 + byte], next_f = c->tf[c->content * 256 + byte];
        if (next_f >= c->free_states) return 0;
        if (next_f >= 0 && c->facc[next_f]) { /* the closing quote */
            if (next_a >= 0) {
                if (!c->closing || !counter_is_end(c, next_a)) return 0;
                *ends = 1;
            }
            continue;
        }
        if (next_f < 0) {
            if (next_a >= 0) return 0;
            continue;
        }
        if (takes >= 0 && takes != (next_a >= 0)) return 0;
        takes = next_a >= 0;
        if (next_a >= 0 && (r = counter_step(c, next_a, next_f, after)) != 1) return r;
    }
    for (Py_ssize_t k = 0; k < c->inside.size; k++) {
        int32_t m = c->inside.data[k], f = c->pair[m - c->lo];
        if (c->acc[m] || c->call_lo[m + 1] != c->call_lo[m]) return 0;
        const int32_t *row_a = c->ta + (Py_ssize_t)m * 256, *row_f = c->tf + (Py_ssize_t)f * 256;
        int mismatch = 0;
        for (int byte = 0; byte < 256; byte++) mismatch |= (row_a[byte] < 0) != (row_f[byte] < 0);
        if (mismatch) return 0;
        int32_t last_a = -1, last_f = -1; /* (runs of bytes to one pair: the continuation bytes) */
        for (int byte = 0; byte < 256; byte++) {
            int32_t next_a = row_a[byte], next_f = row_f[byte];
            if (next_a < 0 || (next_a == last_a && next_f == last_f)) continue;
            if (next_f >= c->free_states || c->facc[next_f]) return 0;
            if ((r = counter_step(c, next_a, next_f, after)) != 1) return r;
            last_a = next_a, last_f = next_f;
        }
    }
    if (takes == 1 && *after < 0) return 0;
    for (Py_ssize_t k = 0; k < c->inside.size; k++) c->after[c->inside.data[k] - c->lo] = *after;
    return 1;
}

/* The counts of `a` from those of the states it goes on to (all counted): 1, 0 where they are not
 * one interval, -1 on memory error. */
static int counter_union(Counter *c, int32_t a, int ends, int32_t after) {
    Py_ssize_t calls = (Py_ssize_t)(c->call_lo[a + 1] - c->call_lo[a]);
    int64_t *parts = (int64_t *)malloc((size_t)(2 * (calls + 2)) * sizeof(int64_t));
    if (!parts) return -1;
    Py_ssize_t n = 0;
    if (ends) parts[2 * n] = 0, parts[2 * n + 1] = 0, n++;
    if (after >= 0) {
        Py_ssize_t j = after - c->lo;
        parts[2 * n] = (int64_t)c->low[j] + 1, parts[2 * n + 1] = (int64_t)c->high[j] + 1, n++;
    }
    for (int64_t call = c->call_lo[a]; call < c->call_lo[a + 1]; call++) {
        Py_ssize_t j = c->ret[call] - c->lo;
        int64_t length = c->lengths[c->callee[call]];
        parts[2 * n] = c->low[j] + length, parts[2 * n + 1] = c->high[j] + length, n++;
    }
    for (Py_ssize_t i = 1; i < n; i++) /* insertion sort by the low end (a few parts) */
        for (Py_ssize_t j = i; j > 0 && parts[2 * j] < parts[2 * j - 2]; j--) {
            int64_t l = parts[2 * j], h = parts[2 * j + 1];
            parts[2 * j] = parts[2 * j - 2], parts[2 * j + 1] = parts[2 * j - 1];
            parts[2 * j - 2] = l, parts[2 * j - 1] = h;
        }
    int found = n > 0;
    int64_t low = found ? parts[0] : 0, high = found ? parts[1] : 0;
    for (Py_ssize_t i = 1; found && i < n; i++) {
        if (parts[2 * i] > high + 1) found = 0;
        if (parts[2 * i + 1] > high) high = parts[2 * i + 1];
    }
    free(parts);
    if (!found || high > INT32_MAX / 2) return 0;
    c->low[a - c->lo] = (int32_t)low;
    c->high[a - c->lo] = (int32_t)high;
    return 1;
}

/* Whether the calls of `a` are of blocks and return within the rule. */
static int counter_calls_known(const Counter *c, int32_t a) {
    for (int64_t call = c->call_lo[a]; call < c->call_lo[a + 1]; call++) {
        if (call < 0 || call >= c->calls || c->callee[call] < 0 || c->callee[call] >= c->rules ||
            c->lengths[c->callee[call]] < 0 || c->ret[call] < c->lo || c->ret[call] >= c->hi)
            return 0;
    }
    return 1;
}

/* Depth first from `start`, a state's counts once those of the states it goes on to are known:
 * 1, 0 (not a counted string) or -1 (an error). */
static int counter_walk(Counter *c, int32_t start) {
    IntBuf stack = {0};
    int r = 1;
    if (buf_push(&stack, start)) return -1;
    while (r == 1 && stack.size) {
        int32_t a = stack.data[stack.size - 1];
        if (a < c->lo || a >= c->hi) {
            r = 0;
            break;
        }
        Py_ssize_t i = a - c->lo;
        if (c->kind[i] == COUNTED) {
            stack.size--;
        } else if (c->kind[i] == OPEN) { /* everything it goes on to is counted now */
            stack.size--;
            r = counter_union(c, a, c->pair[i], c->after[i]);
            c->kind[i] = COUNTED;
        } else if (c->kind[i] == INSIDE) {
            r = 0;
        } else {
            int ends;
            int32_t after;
            c->kind[i] = OPEN;
            if ((r = counter_character(c, a, &ends, &after)) != 1 || !(r = counter_calls_known(c, a))) break;
            c->pair[i] = ends;
            c->after[i] = after;
            Py_ssize_t pushed = stack.size;
            if (after >= 0 && buf_push(&stack, after)) r = -1;
            for (int64_t call = c->call_lo[a]; r == 1 && call < c->call_lo[a + 1]; call++)
                if (buf_push(&stack, c->ret[call])) r = -1;
            for (Py_ssize_t k = pushed; r == 1 && k < stack.size; k++) {
                int8_t kind = c->kind[stack.data[k] - c->lo];
                if (kind == OPEN || kind == INSIDE) r = 0; /* a cycle (no bound), or not between characters */
            }
        }
    }
    free(stack.data);
    return r;
}

/* string_counts(trans, accepting, call_lo, callee, ret, lengths, rule_lo, rule_hi, start, free_trans,
 * free_accepting, free_content, closing) -> bytes or None: per state of the rule (`rule_lo`..`rule_hi`),
 * the fewest and the most characters of a JSON string's content that follow it before the closing
 * quote and the rule's end (`closing`) or before the rule's end (a block), -1 for a state that is not
 * one between characters reached from `start` (int32 pairs); None where the automaton from `start`
 * is anything else. `lengths`: per rule, the characters of a block, -1 for any other rule; the free
 * string's automaton (`free_*`, `free_content` its state between characters, accepting past the
 * quote) is paired with the rule's state for state within each character (`string_chains.string_counts`). */
PyObject *cm_string_counts(PyObject *self, PyObject *args) {
    Py_buffer trans, accepting, call_lo, callee, ret, lengths, free_trans, free_accepting;
    Py_ssize_t lo, hi, start, content;
    int closing;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*nnny*y*np", &trans, &accepting, &call_lo, &callee, &ret, &lengths, &lo,
                          &hi, &start, &free_trans, &free_accepting, &content, &closing))
        return NULL;
    PyObject *result = NULL;
    Counter c = {0};
    Py_ssize_t states = accepting.len, n = hi - lo;
    c.free_states = free_accepting.len;
    c.rules = lengths.len / (Py_ssize_t)sizeof(int32_t);
    c.calls = callee.len / (Py_ssize_t)sizeof(int32_t);
    if (cm_need(&trans, sizeof(int32_t), states * 256, "trans") ||
        cm_need(&call_lo, sizeof(int64_t), states + 1, "call_lo") ||
        cm_need(&ret, sizeof(int32_t), c.calls, "ret") ||
        cm_need(&free_trans, sizeof(int32_t), c.free_states * 256, "free_trans"))
        goto done;
    if (lo < 0 || lo > start || start >= hi || hi > states || content < 0 || content >= c.free_states) {
        cm_bad("string_counts: a state out of range");
        goto done;
    }
    c.ta = (const int32_t *)trans.buf, c.tf = (const int32_t *)free_trans.buf;
    c.call_lo = (const int64_t *)call_lo.buf, c.callee = (const int32_t *)callee.buf;
    c.ret = (const int32_t *)ret.buf, c.lengths = (const int32_t *)lengths.buf;
    c.acc = (const uint8_t *)accepting.buf, c.facc = (const uint8_t *)free_accepting.buf;
    c.lo = lo, c.hi = hi, c.content = content, c.closing = closing;
    c.kind = (int8_t *)calloc((size_t)n, 1);
    c.pair = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    c.after = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    result = PyBytes_FromStringAndSize(NULL, 2 * n * (Py_ssize_t)sizeof(int32_t));
    c.low = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    c.high = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!c.kind || !c.pair || !c.after || !c.low || !c.high || !result) {
        if (result) PyErr_NoMemory();
        Py_CLEAR(result);
        goto done;
    }
    int r = counter_walk(&c, (int32_t)start);
    if (r < 0) {
        PyErr_NoMemory();
        Py_CLEAR(result);
    } else if (r == 0) {
        Py_SETREF(result, Py_NewRef(Py_None));
    } else {
        int32_t *out = (int32_t *)PyBytes_AS_STRING(result);
        for (Py_ssize_t i = 0; i < n; i++) {
            int counted = c.kind[i] == COUNTED;
            out[2 * i] = counted ? c.low[i] : -1;
            out[2 * i + 1] = counted ? c.high[i] : -1;
        }
    }
done:
    free(c.kind);
    free(c.pair);
    free(c.after);
    free(c.low);
    free(c.high);
    free(c.inside.data);
    PyBuffer_Release(&trans);
    PyBuffer_Release(&accepting);
    PyBuffer_Release(&call_lo);
    PyBuffer_Release(&callee);
    PyBuffer_Release(&ret);
    PyBuffer_Release(&lengths);
    PyBuffer_Release(&free_trans);
    PyBuffer_Release(&free_accepting);
    return result;
}
