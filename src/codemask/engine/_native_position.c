/* ---------------------------------------------------------------------------------------------
 * A byte-level position's classification in one pass (`position_classifier.PositionClassifier`).
 *
 * A `PositionWalker` holds one vocabulary's trie in depth-first preorder (`token_trie.PreorderTrie`),
 * the sorted rows' token ids, lengths and bytes, and the trie's exact suffix numbers, all checked
 * once. `classify` scans the trie from a frame-local parser state with the parser state of the
 * current path kept per depth, jumping over a subtree where the parse dies (the lexer's scan, over
 * `ParserCore.table`; transitions not known yet are computed on the way by the core's `Interner`,
 * a row at a time), and gives the position's accepted tokens as a bitmask row and its uncertain
 * tokens, those that leave the frame after `d` bytes where a caller may go on with the residual
 * `token[d:]` (its first byte one the frame may be followed by), with the residuals made distinct
 * by their suffix numbers. The numpy walk of `trie_walk` gives the same sets (the tests compare
 * them); this one is a single C call per position, well under a millisecond where the numpy walk
 * and its bookkeeping took 5-15 ms on a wide position. `resolve` walks a position's distinct
 * residuals from a caller's state and sets the bits of the tokens whose residual it accepts.
 * ------------------------------------------------------------------------------------------- */

#include "_native.h"

enum { PW_BYTE, PW_DEPTH, PW_LO, PW_HI, PW_TOKEN, PW_END, PW_ORDER, PW_LENGTH, PW_SUFFIX_START, PW_SUFFIX_IDS,
       PW_MATRIX, PW_NUM_VIEWS };

/* A subtree with at least this many tokens keeps the set of bytes it holds and its height: where
 * every one of those bytes takes the path's parser state to one same next state, and so on for as
 * many bytes as the subtree is high, every token below is accepted without visiting its nodes,
 * unless a state on that chain may end the frame before a byte that may follow it (then some
 * tokens below are uncertain, and the nodes are visited). A free string's content loops on one
 * state (most of a vocabulary is printable ASCII other than the quote and the backslash); a
 * string of bounded length moves along a chain of states, one per character. The bytes of a
 * multi-byte character go through states of their own, so the byte test refuses every subtree
 * that holds one (a large share of a 128k vocabulary); where every such character leads from each
 * state of the chain to the next (`utf8_uniform`), a subtree whose tokens are all well-formed
 * UTF-8 (`bulk_utf8`), what lies past the last complete character included, is taken whole
 * when it is no higher than the characters left on the chain (a character takes a byte at least). */
#define BULK_TOKENS 4
#define STEP_BITS 12
#define CHAIN_MAX 1024
#define CHAIN_LONG (1 << 30)

/* The states of a UTF-8 decoder (RFC 3629: no overlong forms, surrogates or code points past
 * U+10FFFF): between characters, 1-3 continuation bytes of 80-BF to go, and the four second bytes
 * of narrower range (after E0, ED, F0 and F4), with two or one more to go after them. */
enum { U8_START, U8_ONE, U8_TWO, U8_THREE, U8_AFTER_E0, U8_AFTER_ED, U8_AFTER_F0, U8_AFTER_F4, U8_STATES, U8_BAD = U8_STATES };

#define UNSEEN (-4) /* (a record's `inside` not known yet) */

/* The memo of walks below first bytes (`memo_entry`, below). */
#define MEMO_MIN_ROWS 4096
#define MEMO_ENTRIES 96
#define MEMO_PER_WALK 32 /* (at most: groups of MEMO_MIN_ROWS tokens each in a 128k vocabulary) */
#define SHAPE_STATES 48
#define SHAPE_SLOTS 128  /* (open addressing from state to its number, over twice SHAPE_STATES) */
#define SHAPE_LOOP_BYTES 64 /* (the bytes a state must loop on to be known by its shape) */
#define SHAPE_HOPS 3 /* (the steps a state may take to such a loop: a UTF-8 lead byte's three) */

/* The walks below first-level nodes from states of one shape: per root whether it was walked, the
 * accepted rows as a bitmap over the sorted rows and as a token-id bitmask, and the exits found,
 * (root, node, depth) triples. */
typedef struct MemoEntry {
    int32_t *shape;
    Py_ssize_t shape_len;
    uint64_t hash, last_used;
    uint64_t id;        /* (unique in the walker: what `SeenState` points at) */
    uint64_t made_by;   /* the serial of the interner whose walk made it */
    uint64_t follow[4]; /* the bytes a residual may begin with when it was walked (all: none kept) */
    int has_follow;
    uint8_t done[256];
    uint64_t *rows;
    uint32_t *words;
    Py_ssize_t done_rows;
    IntBuf exits;
} MemoEntry;
/* Which entry a state of a core was found to be (`memo_entry_of`): a state's shape never changes,
 * and working it out again scanned up to SHAPE_STATES rows per group of every walk. Direct-mapped
 * by (core, state); a stale record (its entry dropped) is worked out again. */
typedef struct {
    uint64_t serial, entry_id;
    int32_t state;
    int has_follow;
    uint64_t follow[4];
} SeenState;
#define SEEN_STATES 512

typedef struct {
    MemoEntry *entries;
    Py_ssize_t count;
    uint64_t clock;   /* (a use's stamp, for dropping the least recently used) */
    uint64_t next_id; /* (the next entry's id; 0 marks an empty `SeenState`) */
    SeenState seen[SEEN_STATES];
} WalkMemo;

/* What a walk knows of a parser state it met (`step_info`): the bytes it takes (`alive`), its most
 * common transition target and the bytes that lead there, and along the chain of those targets
 * (while each next state's common bytes include these): how many bytes a path of these bytes can
 * take (`len`, CHAIN_LONG for a loop), the state it then reaches (`end`) and how many of the states
 * on the way may not end the frame (`no_exit`); -1 while not known. `next` is the next state's
 * record while the chain goes on (itself for a loop), `chars` how many characters the chain takes
 * where each may also be any multi-byte UTF-8 character (`char_chain`) and `chars_end` the state it
 * then reaches; -1 while not known. */
typedef struct StepInfo {
    int32_t state, target, len, no_exit, end, chars, chars_end;
    int32_t inside[U8_STATES]; /* per decoder state: where its characters end (`inside_target`) */
    uint32_t gen;
    struct StepInfo *next;
    uint64_t bytes[4], alive[4];
} StepInfo;

typedef struct {
    PyObject_HEAD
    Py_buffer v[PW_NUM_VIEWS];
    Py_ssize_t nodes, rows, width, nwords, max_depth;
    uint32_t *ok_stamp; /* per row: the generation in which the current walk accepted it */
    uint32_t gen;
    int32_t *path;      /* per depth: the parser state after the current path's prefix */
    /* per depth: where the path is followed in the RTN itself (`rtn_chain`), its RTN state and
     * the bottom below it (`path` is then DEAD), else -1 */
    int32_t *rtn_path, *rtn_bottom;
    int busy;           /* a walk is running (a transition it computes may run Python code) */
    /* per node with at least BULK_TOKENS tokens below it: the index of the bytes its subtree holds
     * (-1 for the others), and those bytes as 256-bit sets (`bulk_bytes`, four words each) */
    int32_t *bulk_of, *bulk_height;
    uint64_t *bulk_bytes;
    int32_t *bulk_chars_above; /* per kept node: the characters its parent's prefix begins (`char_starts`) */
    int32_t *row_chars; /* per row: the characters its token begins, whole or not (`char_starts`) */
    uint8_t *bulk_utf8; /* per kept node, bit q: every token below is well-formed UTF-8 from the node's byte on,
                         * decoded from state q (`utf8_bits`) */
    /* per walk: the states it met (`step_info`), open addressing by state, stamped by walk; full,
     * a walk visits its nodes one by one */
    StepInfo *steps;
    Py_ssize_t steps_used;
    int32_t *roots;     /* the first-level nodes (depth 1), in order */
    int32_t root_rows[256]; /* per first-level node: the tokens below it (rows), itself included */
    Py_ssize_t nroots;
    WalkMemo memo;      /* the walks below first bytes, by the shape of the state they start from */
    Py_ssize_t memo_shared_hits; /* entries read by a core other than the one whose walk made them */
    Py_ssize_t memo_shapes;      /* states whose shape was worked out (not found in `WalkMemo.seen`) */
    int32_t *shape;     /* scratch: a state's shape (`state_shape`) */
} PositionWalker;

static void memo_clear(WalkMemo *m);

/* The parser core's transition table and per-state flags, taken again after a row is filled (the
 * core grows them into new arrays). */
typedef struct {
    const int32_t *table;
    const uint8_t *flags, *has_stacks;
    Py_ssize_t states;
} CoreView;

static int core_view(Interner *x, PyObject *core, CoreView *v) {
    Py_ssize_t states = PyList_GET_SIZE(x->state_stacks);
    if (cm_core_arrays(x, core, states)) return -1;
    v->table = (const int32_t *)x->held_table.view.buf;
    v->flags = (const uint8_t *)x->held_flags.view.buf;
    v->has_stacks = (const uint8_t *)x->held_has_stacks.view.buf;
    v->states = states;
    return 0;
}

/* `ParserCore.step` of a live state: the memoised transition, else computed and memoised. The walks
 * fill the state's whole row (`fill_row`: they read its other bytes next); a residual's step
 * (`one`) computes only the transition it takes (`cm_step_state`): a residual goes on with one byte
 * of a state whose other bytes may each open a closure of their own. FAILED with an exception set. */
static int32_t step_as(Interner *x, PyObject *core, CoreView *v, int32_t state, uint8_t byte, int one) {
    if (state < 0 || state >= v->states) return cm_bad("parser state out of range"), FAILED;
    int32_t next = v->table[(Py_ssize_t)state * 256 + byte];
    if (next == UNKNOWN && one) {
        next = cm_step_state(x, core, state, byte);
        if (next == FAILED || core_view(x, core, v)) return FAILED;
        ((int32_t *)x->held_table.view.buf)[(Py_ssize_t)state * 256 + byte] = next;
    } else if (next == UNKNOWN) {
        Ctx *c = cm_ctx_take(x);
        if (!c) return FAILED;
        int status = cm_fill_row(x, core, c, state);
        cm_ctx_give(x, c);
        if (status || core_view(x, core, v)) return FAILED;
        next = v->table[(Py_ssize_t)state * 256 + byte];
    }
    if (next < DEAD || next >= v->states) return cm_bad("transition to a parser state out of range"), FAILED;
    return next;
}

static int32_t core_step(Interner *x, PyObject *core, CoreView *v, int32_t state, uint8_t byte) {
    return step_as(x, core, v, state, byte, 0);
}

static void pwalker_dealloc(PositionWalker *w) {
    for (int i = 0; i < PW_NUM_VIEWS; i++) {
        if (w->v[i].obj) PyBuffer_Release(&w->v[i]);
    }
    free(w->ok_stamp);
    free(w->path);
    free(w->rtn_path);
    free(w->rtn_bottom);
    free(w->bulk_of);
    free(w->bulk_height);
    free(w->bulk_bytes);
    free(w->bulk_utf8);
    free(w->bulk_chars_above);
    free(w->row_chars);
    free(w->steps);
    free(w->roots);
    if (w->memo.entries) memo_clear(&w->memo);
    free(w->memo.entries);
    free(w->shape);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static int utf8_next(int q, uint8_t b) {
    int cont = b >= 0x80 && b <= 0xBF;
    switch (q) {
    case U8_START:
        if (b < 0x80) return U8_START;
        if (b >= 0xC2 && b <= 0xDF) return U8_ONE;
        if (b == 0xE0) return U8_AFTER_E0;
        if (b == 0xED) return U8_AFTER_ED;
        if (b >= 0xE1 && b <= 0xEF) return U8_TWO;
        if (b == 0xF0) return U8_AFTER_F0;
        if (b == 0xF4) return U8_AFTER_F4;
        if (b >= 0xF1 && b <= 0xF3) return U8_THREE;
        return U8_BAD;
    case U8_ONE: return cont ? U8_START : U8_BAD;
    case U8_TWO: return cont ? U8_ONE : U8_BAD;
    case U8_THREE: return cont ? U8_TWO : U8_BAD;
    case U8_AFTER_E0: return b >= 0xA0 && b <= 0xBF ? U8_ONE : U8_BAD;
    case U8_AFTER_ED: return b >= 0x80 && b <= 0x9F ? U8_ONE : U8_BAD;
    case U8_AFTER_F0: return b >= 0x90 && b <= 0xBF ? U8_TWO : U8_BAD;
    default: return b >= 0x80 && b <= 0x8F ? U8_TWO : U8_BAD; /* U8_AFTER_F4 */
    }
}

/* Per decoder state q (bit q): whether every token below node `i` is well-formed UTF-8 from its
 * byte `b` on when decoding reaches it in state q, given the AND of its children's bits `below`. */
static uint8_t utf8_bits(uint8_t b, uint8_t below) {
    uint8_t bits = 0;
    for (int q = 0; q < U8_STATES; q++) {
        int after = utf8_next(q, b);
        if (after != U8_BAD && (below >> after & 1)) bits |= (uint8_t)(1u << q);
    }
    return bits;
}

/* `bulk_of`, `bulk_bytes`, `bulk_height` and `bulk_utf8`: a node's byte set is its own byte and its
 * children's sets, its height one more than its highest child's, and its UTF-8 bits follow from its
 * byte and its children's (`utf8_bits`), so one backward pass over the preorder computes them all
 * (for every node in scratch, then kept for the nodes with enough tokens below). */
static int pwalker_bulk(PositionWalker *w) {
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf, *end = w->v[PW_END].buf;
    Py_ssize_t n = w->nodes, kept = 0;
    uint64_t *all = (uint64_t *)malloc((size_t)(n ? n : 1) * 4 * sizeof(uint64_t));
    int32_t *height = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    uint8_t *utf8 = (uint8_t *)malloc((size_t)(n ? n : 1));
    w->bulk_of = (int32_t *)malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    if (!all || !height || !utf8 || !w->bulk_of) {
        free(all);
        free(height);
        free(utf8);
        return PyErr_NoMemory(), -1;
    }
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        uint64_t *set = all + 4 * i;
        uint8_t below = 0xFF;
        memset(set, 0, 4 * sizeof(uint64_t));
        set[byte[i] >> 6] |= (uint64_t)1 << (byte[i] & 63);
        height[i] = 1;
        for (Py_ssize_t c = i + 1; c < end[i]; c = end[c]) {
            for (int k = 0; k < 4; k++) set[k] |= all[4 * c + k];
            if (height[c] + 1 > height[i]) height[i] = height[c] + 1;
            below &= utf8[c];
        }
        utf8[i] = utf8_bits(byte[i], below);
        w->bulk_of[i] = -1;
        if (hi[i] - lo[i] >= BULK_TOKENS) kept++;
    }
    w->bulk_bytes = (uint64_t *)malloc((size_t)(kept ? kept : 1) * 4 * sizeof(uint64_t));
    w->bulk_height = (int32_t *)malloc((size_t)(kept ? kept : 1) * sizeof(int32_t));
    w->bulk_utf8 = (uint8_t *)malloc((size_t)(kept ? kept : 1));
    if (!w->bulk_bytes || !w->bulk_height || !w->bulk_utf8) {
        free(all);
        free(height);
        free(utf8);
        return PyErr_NoMemory(), -1;
    }
    kept = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (hi[i] - lo[i] < BULK_TOKENS) continue;
        memcpy(w->bulk_bytes + 4 * kept, all + 4 * i, 4 * sizeof(uint64_t));
        w->bulk_height[kept] = height[i];
        w->bulk_utf8[kept] = utf8[i];
        w->bulk_of[i] = (int32_t)kept++;
    }
    free(all);
    free(height);
    free(utf8);
    return 0;
}

/* `row_chars` and `bulk_chars_above`: how many characters a token, and the prefix above a kept
 * node, begin (their bytes that are not continuation bytes 80-BF), over the preorder with the count
 * of the current path kept per depth. */
static int char_starts(PositionWalker *w) {
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *depth = w->v[PW_DEPTH].buf, *token = w->v[PW_TOKEN].buf;
    int32_t *at = (int32_t *)calloc((size_t)(w->max_depth + 1), sizeof(int32_t));
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < w->nodes; i++) kept += w->bulk_of[i] >= 0;
    w->row_chars = (int32_t *)malloc((size_t)(w->rows ? w->rows : 1) * sizeof(int32_t));
    w->bulk_chars_above = (int32_t *)malloc((size_t)(kept ? kept : 1) * sizeof(int32_t));
    if (!at || !w->row_chars || !w->bulk_chars_above) {
        free(at);
        return PyErr_NoMemory(), -1;
    }
    for (Py_ssize_t i = 0; i < w->nodes; i++) {
        int32_t d = depth[i];
        at[d] = at[d - 1] + ((byte[i] & 0xC0) != 0x80);
        if (token[i] >= 0) w->row_chars[token[i]] = at[d];
        if (w->bulk_of[i] >= 0) w->bulk_chars_above[w->bulk_of[i]] = at[d - 1];
    }
    free(at);
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
    e->len = e->no_exit = e->end = e->chars = e->chars_end = -1;
    e->next = NULL;
    for (int q = 0; q < U8_STATES; q++) e->inside[q] = UNSEEN;
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
            c->next = c;
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
            c->next = next;
        }
        c->len = len >= CHAIN_LONG - 1 ? CHAIN_LONG : len + 1;
        c->no_exit = flagged ? 0 : (no_exit >= CHAIN_LONG - 1 ? CHAIN_LONG : no_exit + 1);
    }
    return 0;
}

/* The lead bytes of multi-byte UTF-8 characters by the range of their second byte and how many
 * continuation bytes (80-BF) follow that one. */
static const struct {
    uint8_t lead_lo, lead_hi, second_lo, second_hi, more;
} UTF8_LEADS[] = {
    {0xC2, 0xDF, 0x80, 0xBF, 0}, {0xE0, 0xE0, 0xA0, 0xBF, 1}, {0xE1, 0xEC, 0x80, 0xBF, 1}, {0xED, 0xED, 0x80, 0x9F, 1},
    {0xEE, 0xEF, 0x80, 0xBF, 1}, {0xF0, 0xF0, 0x90, 0xBF, 2}, {0xF1, 0xF3, 0x80, 0xBF, 2}, {0xF4, 0xF4, 0x80, 0x8F, 2},
};

/* The states inside a character already checked by `utf8_uniform` (with how many continuation
 * bytes of 80-BF they have left), so that the characters of one lead byte share their checks. */
#define UTF8_CHECKED 48
typedef struct {
    int32_t state[UTF8_CHECKED];
    uint8_t more[UTF8_CHECKED];
    int count;
} Utf8Checked;

/* Whether every byte of `lo`..`hi` from state `s` (inside a character, so it must not end the
 * frame), then `more` continuation bytes, leads to `target`: 1 yes, 0 no, -1 on error. */
static int utf8_rest(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, Utf8Checked *seen, int32_t s,
                     int lo, int hi, int more, int32_t target) {
    if (s < 0 || v->flags[s]) return 0;
    int generic = lo == 0x80 && hi == 0xBF;
    for (int k = 0; generic && k < seen->count; k++) {
        if (seen->state[k] == s && seen->more[k] == more) return 1;
    }
    for (int b = lo; b <= hi; b++) {
        int32_t next = core_step(x, core, v, s, (uint8_t)b);
        if (next == FAILED) return -1;
        if (more == 0) {
            if (next != target) return 0;
            continue;
        }
        int found = utf8_rest(w, x, core, v, seen, next, 0x80, 0xBF, more - 1, target);
        if (found <= 0) return found;
    }
    if (generic) {
        if (seen->count == UTF8_CHECKED) return 0; /* (too many states inside characters: not uniform) */
        seen->state[seen->count] = s;
        seen->more[seen->count++] = (uint8_t)more;
    }
    return 1;
}

/* Whether every multi-byte UTF-8 character takes `e`'s state to its common target, through states
 * that may not end the frame: 1 yes, 0 no, -1 on error (an exception is set). */
static int utf8_uniform(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, const StepInfo *e) {
    if (e->target < 0) return 0;
    Utf8Checked seen;
    seen.count = 0;
    for (size_t k = 0; k < sizeof(UTF8_LEADS) / sizeof(UTF8_LEADS[0]); k++) {
        for (int lead = UTF8_LEADS[k].lead_lo; lead <= UTF8_LEADS[k].lead_hi; lead++) {
            int32_t s = core_step(x, core, v, e->state, (uint8_t)lead);
            if (s == FAILED) return -1;
            int found = utf8_rest(w, x, core, v, &seen, s, UTF8_LEADS[k].second_lo, UTF8_LEADS[k].second_hi,
                                  UTF8_LEADS[k].more, e->target);
            if (found <= 0) return found;
        }
    }
    return 1;
}

/* `chars` and `chars_end` of `e` (its `len` known) and of the states along its chain: 0 where a
 * multi-byte character does not lead to the common target (`utf8_uniform`), else one more than
 * the next state's (CHAIN_LONG for a loop). The chain is followed for CHAR_CHAIN_MAX states at
 * most, each checked through the states inside its characters (several rows to fill per state,
 * where a long bounded string has hundreds of states), and ends there: `chars` is then a lower
 * bound, and the state reached takes more, so no subtree is cut at it. 0 done, -1 on error (an
 * exception is set). */
#define CHAR_CHAIN_MAX 16
static int char_chain(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, StepInfo *e) {
    StepInfo *chain[CHAR_CHAIN_MAX];
    int k = 0;
    chain[0] = e;
    while (k + 1 < CHAR_CHAIN_MAX && chain[k]->next && chain[k]->next != chain[k] && chain[k]->next->chars < 0) {
        chain[k + 1] = chain[k]->next;
        k++;
    }
    for (; k >= 0; k--) {
        StepInfo *c = chain[k];
        int uniform = utf8_uniform(w, x, core, v, c);
        if (uniform < 0) return -1;
        if (!uniform) {
            c->chars = 0;
            c->chars_end = c->state;
        } else if (c->next == c) {
            c->chars = CHAIN_LONG;
            c->chars_end = c->state;
        } else if (c->next && c->next->chars >= 0) {
            c->chars = c->next->chars >= CHAIN_LONG - 1 ? CHAIN_LONG : c->next->chars + 1;
            c->chars_end = c->next->chars_end;
        } else {
            c->chars = 1;
            c->chars_end = c->target;
        }
    }
    return 0;
}

/* How far a subtree (byte set `bytes`, height `height`) is taken whole along a chain that runs
 * `length` steps to state `end`, leaving the frame nowhere before `no_exit` steps: the chain's
 * reach, or -1 where the subtree must be walked (a token could leave the frame before the chain's
 * last state, or a byte below the chain's end lives on), -2 on error. `*exit_at_end` is set where
 * only the chain's last state may end the frame: the longer tokens leave it there. */
static int32_t chain_reach(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t length,
                           int32_t no_exit, int32_t end, const uint64_t *bytes, int32_t height,
                           const uint64_t *follow_bits, int *exit_at_end) {
    int32_t reach = length < height ? length : height;
    if (follow_bits && meets(bytes, follow_bits) && no_exit < (reach < height - 1 ? reach : height - 1)) {
        if (reach == height || no_exit != reach - 1) return -1;
        *exit_at_end = 1;
    }
    if (reach == height) return reach;
    StepInfo *last = step_info(w, x, core, v, end); /* where the chain ends: every byte below must die */
    if (!last) return PyErr_Occurred() ? -2 : -1;
    return meets(bytes, last->alive) ? -1 : reach;
}

/* The bulk test of a subtree whose tokens are all well-formed UTF-8 (`bulk_utf8`) and whose ASCII
 * bytes all lead to the common target of `e`: each character of a token (the last one perhaps cut
 * short) moves one state along the chain of characters from `e`, so the tokens below are accepted
 * exactly when they begin at most as many characters as the chain takes, where every byte below
 * dies at its end and no state on the way may end the frame where exits are kept, but perhaps the
 * last (`*exit_at_end`: the longer tokens leave the frame there). Its height where the chain is at
 * least that long (a character takes a byte at least: every token is accepted), else that many
 * characters with `*chars` set to it; -1 where this does not hold, -2 on error (an exception is
 * set). */
static int32_t bulk_chars(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, StepInfo *e,
                          const uint64_t *bytes, int32_t height, const uint64_t *follow_bits, int32_t *chars,
                          int *exit_at_end) {
    if ((bytes[0] & ~e->bytes[0]) || (bytes[1] & ~e->bytes[1])) return -1;
    if (e->len < 0 && chain_info(w, x, core, v, e)) return -2;
    if (e->chars < 0 && char_chain(w, x, core, v, e)) return -2;
    int32_t reach = chain_reach(w, x, core, v, e->chars, e->no_exit, e->chars_end, bytes, height, follow_bits,
                                exit_at_end);
    if (reach >= 0 && reach < height) *chars = reach;
    return reach;
}

/* Per decoder state inside a character: the range of the next byte, how many continuation bytes of
 * 80-BF follow it, and so how many bytes end the character. */
static const struct {
    uint8_t lo, hi, more, bytes;
} UTF8_REST[U8_STATES] = {
    {0, 0, 0, 0}, /* (U8_START: between characters) */
    {0x80, 0xBF, 0, 1}, {0x80, 0xBF, 1, 2}, {0x80, 0xBF, 2, 3}, {0xA0, 0xBF, 1, 2},
    {0x80, 0x9F, 1, 2}, {0x90, 0xBF, 2, 3}, {0x80, 0x8F, 2, 3},
};

/* Where the rest of every character from `e`'s state ends when the state is taken to be inside a
 * character at decoder state `q` (all of them at one state, through states that may not end the
 * frame), else DEAD; FAILED on error (an exception is set). Kept in `e->inside`. */
static int32_t inside_target(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, StepInfo *e, int q) {
    if (e->inside[q] != UNSEEN) return e->inside[q];
    int32_t t = e->state;
    for (int k = 0; k <= UTF8_REST[q].more && t >= 0; k++) {
        t = core_step(x, core, v, t, k ? 0x80 : UTF8_REST[q].lo); /* (one character: its end is the candidate) */
        if (t == FAILED) return FAILED;
    }
    if (t >= 0) {
        Utf8Checked seen;
        seen.count = 0;
        int found = utf8_rest(w, x, core, v, &seen, e->state, UTF8_REST[q].lo, UTF8_REST[q].hi, UTF8_REST[q].more, t);
        if (found < 0) return FAILED;
        if (!found) t = DEAD;
    }
    e->inside[q] = t < 0 ? DEAD : t;
    return e->inside[q];
}

/* The bulk test of a subtree entered inside a character (its tokens well-formed UTF-8 from one of
 * the decoder states `bits` besides U8_START): where, for such a decoder state, every rest of a
 * character leads to one same state (`inside_target`) from which the chain of characters takes
 * what follows as in `bulk_chars` (the characters counted are those that begin below the node). */
static int32_t bulk_inside(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, StepInfo *e,
                           const uint64_t *bytes, int32_t height, const uint64_t *follow_bits, uint8_t bits,
                           int32_t *chars, int *exit_at_end) {
    for (int q = U8_ONE; q < U8_STATES; q++) {
        if (!(bits >> q & 1)) continue;
        int32_t t = inside_target(w, x, core, v, e, q);
        if (t == FAILED) return -2;
        if (t < 0) continue;
        int32_t rest = height - UTF8_REST[q].bytes; /* (bytes past the character's end, at most) */
        if (rest <= 0) return height;
        StepInfo *te = step_info(w, x, core, v, t);
        if (!te) return PyErr_Occurred() ? -2 : -1;
        if (te->target < 0 || (bytes[0] & ~te->bytes[0]) || (bytes[1] & ~te->bytes[1])) continue;
        if (te->len < 0 && chain_info(w, x, core, v, te)) return -2;
        if (te->chars < 0 && char_chain(w, x, core, v, te)) return -2;
        int32_t reach = te->chars < rest ? te->chars : rest;
        int exits = 0;
        if (follow_bits && meets(bytes, follow_bits) && (v->flags[t] || te->no_exit < (reach < rest - 1 ? reach : rest - 1))) {
            /* (the states after 0, 1, ... characters past the end of this one: only the last may end the frame) */
            if (reach == rest || (reach ? v->flags[t] || te->no_exit != reach - 1 : !v->flags[t])) continue;
            exits = 1;
        }
        if (reach == rest) return height;
        StepInfo *last = step_info(w, x, core, v, te->chars_end);
        if (!last) return PyErr_Occurred() ? -2 : -1;
        if (meets(bytes, last->alive)) continue;
        *chars = reach;
        *exit_at_end = exits;
        return reach;
    }
    return -1;
}

/* How many bytes below a node (with byte set `bytes` and height `height`, entered from `state`)
 * every path takes uniformly, all of them accepted and then none (see BULK_TOKENS): the tokens
 * below the node are then accepted exactly when they are at most that long, and no token below
 * leaves the frame where a residual could be kept but perhaps at the chain's end, where every longer
 * token then leaves it (`*exit_at_end` set); -1 where this does not hold (the nodes are then
 * visited one by one), -2 on error (an exception is set). `follow_bits` are the bytes a residual
 * may begin with (NULL: exits are not kept); `utf8`: the decoder states from which every token
 * below is well-formed UTF-8 (`bulk_utf8`), so that the chain may be one of characters
 * (`bulk_chars`, or `bulk_inside` for a subtree that begins inside a character), and then the
 * tokens accepted are those that begin at most `*chars` characters below the node where it is set
 * (not every token accepted). */
static int32_t bulk_reach(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t state,
                          const uint64_t *bytes, int32_t height, const uint64_t *follow_bits, uint8_t utf8,
                          int32_t *chars, int *exit_at_end) {
    StepInfo *e = step_info(w, x, core, v, state);
    if (!e) return PyErr_Occurred() ? -2 : -1;
    if (utf8 & ~1u) return bulk_inside(w, x, core, v, e, bytes, height, follow_bits, utf8, chars, exit_at_end);
    if (e->target < 0) return -1;
    if (!subset_of(bytes, e->bytes))
        return utf8 ? bulk_chars(w, x, core, v, e, bytes, height, follow_bits, chars, exit_at_end) : -1;
    if (e->len < 0 && chain_info(w, x, core, v, e)) return -2;
    return chain_reach(w, x, core, v, e->len, e->no_exit, e->end, bytes, height, follow_bits, exit_at_end);
}

/* The arrays' shapes and every index they hold, checked once: the walks then read them unchecked. */
static int pwalker_check(PositionWalker *w) {
    Py_ssize_t n = w->v[PW_BYTE].len, rows = w->v[PW_ORDER].len / (Py_ssize_t)sizeof(int32_t);
    for (int i = PW_DEPTH; i <= PW_END; i++) {
        if (cm_need(&w->v[i], sizeof(int32_t), n, "trie array")) return -1;
    }
    if (cm_need(&w->v[PW_ORDER], sizeof(int32_t), rows, "order") ||
        cm_need(&w->v[PW_LENGTH], sizeof(int32_t), rows, "lengths") ||
        cm_need(&w->v[PW_SUFFIX_START], sizeof(int64_t), rows + 1, "suffix_start"))
        return -1;
    const int32_t *depth = w->v[PW_DEPTH].buf, *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf;
    const int32_t *token = w->v[PW_TOKEN].buf, *end = w->v[PW_END].buf, *order = w->v[PW_ORDER].buf;
    const int32_t *length = w->v[PW_LENGTH].buf;
    const int64_t *start = w->v[PW_SUFFIX_START].buf;
    Py_ssize_t ids = w->v[PW_SUFFIX_IDS].len / (Py_ssize_t)sizeof(int64_t);
    if (cm_need(&w->v[PW_SUFFIX_IDS], sizeof(int64_t), ids, "suffix_ids")) return -1;
    if (w->width < 1 || cm_need(&w->v[PW_MATRIX], 1, rows * w->width, "matrix")) return -1;
    w->max_depth = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (depth[i] < 1 || end[i] <= i || end[i] > n || lo[i] < 0 || lo[i] > hi[i] || hi[i] > rows ||
            token[i] < -1 || token[i] >= rows || (i + 1 < n && depth[i + 1] > depth[i] + 1) || (i == 0 && depth[0] != 1))
            return cm_bad("trie arrays: a depth, subtree end, token or row range out of order");
        if (depth[i] > w->max_depth) w->max_depth = depth[i];
    }
    if (start[0] != 0 || start[rows] != ids) return cm_bad("suffix_start: not the bounds of the suffix ids");
    for (Py_ssize_t r = 0; r < rows; r++) {
        if (order[r] < 0 || order[r] / 32 >= w->nwords) return cm_bad("order: a token id past the bitmask row");
        if (length[r] < 1 || length[r] > w->width || start[r + 1] - start[r] != length[r])
            return cm_bad("lengths: a token length out of the matrix or the suffix ids");
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
    w->rtn_path = (int32_t *)malloc((size_t)(w->max_depth + 1) * sizeof(int32_t));
    w->rtn_bottom = (int32_t *)malloc((size_t)(w->max_depth + 1) * sizeof(int32_t));
    if (!w->ok_stamp || !w->path || !w->rtn_path || !w->rtn_bottom) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    w->steps = (StepInfo *)calloc((size_t)1 << STEP_BITS, sizeof(StepInfo));
    w->memo.entries = (MemoEntry *)calloc(MEMO_ENTRIES, sizeof(MemoEntry));
    w->shape = (int32_t *)malloc((size_t)SHAPE_STATES * 258 * sizeof(int32_t));
    if (!w->steps || !w->memo.entries || !w->shape) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    if (pwalker_bulk(w) || char_starts(w)) {
        Py_DECREF(w);
        return NULL;
    }
    const int32_t *depth = w->v[PW_DEPTH].buf, *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf;
    w->roots = (int32_t *)malloc(257 * sizeof(int32_t));
    if (!w->roots) {
        Py_DECREF(w);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < w->nodes; i++) {
        if (depth[i] != 1) continue;
        if (w->nroots == 256) {
            Py_DECREF(w);
            return cm_bad("trie arrays: more than 256 first-level nodes"), NULL;
        }
        w->root_rows[w->nroots] = hi[i] - lo[i];
        w->roots[w->nroots++] = (int32_t)i;
    }
    return (PyObject *)w;
}

/* The interner argument of a walk: a byte-level core's (calls expanded). */
static Interner *walk_interner(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &cm_InternerType)) {
        PyErr_SetString(PyExc_TypeError, "expected a ParserCore's native Interner");
        return NULL;
    }
    Interner *x = (Interner *)obj;
    if (x->alphabet != 256 || x->lazy) {
        cm_bad("position walks need a byte-level parser core with its calls expanded");
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

/* Add rows `first`..`last` (those not accepted outright: `ok_rows` of a memo entry, else this walk's
 * stamps) to the uncertain tokens `unc`, with their residuals from byte `d` on made distinct by
 * `map`; 0, or -1 on error (an exception is set). */
static int list_uncertain(PositionWalker *w, SuffixMap *map, IntBuf *unc, const uint64_t *ok_rows, uint32_t gen,
                          int32_t first, int32_t last, int32_t d) {
    const int32_t *length = w->v[PW_LENGTH].buf;
    const int64_t *suffix_start = w->v[PW_SUFFIX_START].buf, *suffix_ids = w->v[PW_SUFFIX_IDS].buf;
    for (int32_t row = first; row < last; row++) {
        if (ok_rows ? (ok_rows[row >> 6] >> (row & 63) & 1) : w->ok_stamp[row] == gen) continue;
        if (d >= length[row]) return cm_bad("trie arrays: a token below a node is not longer than the node's prefix");
        int32_t fresh = (int32_t)unc[2].size;
        int32_t r = suffix_map_get(map, suffix_ids[suffix_start[row] + d], fresh);
        if (buf_push(&unc[0], row) || buf_push(&unc[1], r)) return -1;
        if (r == fresh && (buf_push(&unc[2], row) || buf_push(&unc[3], d) || buf_push(&unc[4], length[row] - d)))
            return -1;
    }
    return 0;
}

/* ---- the walker's memo of trie walks below first bytes ---- */

/* A first-level group at least this large (in tokens) reads its subtrees from the memo: what lies
 * below depends only on the parser state the group's byte leads to, and very often that state is
 * met again, by a later position of the grammar or by another grammar. A state that loops on
 * SHAPE_LOOP_BYTES bytes or more (free text), or leads there in at most SHAPE_HOPS steps on that
 * many bytes each (a letter of a key complement that begins one of the schema's keys, a UTF-8
 * lead byte inside a string), is known by its `shape`: the frame-local automaton it reaches,
 * numbered in the order a breadth-first scan of its rows meets the states, with each state's
 * flags; two states of one shape give the same walk whatever their cores, so every key complement
 * of every schema goes on as the same free string, and the objects of a schema that share their
 * key names walk their spelling once. Other states (a closed key's spelling, the chain of a
 * counted string, whitespace), and shapes of more than SHAPE_STATES states, are known by their
 * core and state id (`identity_shape`): their automata go on into the grammar's structure, where
 * a shape would fill rows the walk never reads. */
static void memo_free_entry(MemoEntry *e) {
    free(e->shape);
    free(e->rows);
    free(e->words);
    free(e->exits.data);
}

static void memo_clear(WalkMemo *m) {
    for (Py_ssize_t k = 0; k < m->count; k++) memo_free_entry(&m->entries[k]);
    m->count = 0;
}

/* Room for a walk's entries, made before it starts (so that no entry it reads is freed) when the
 * memo is nearly full: down to half, the entries known by a core's state id first (a grammar's own,
 * rarely met again once it is done), then the least recently used. */
static void memo_room(WalkMemo *m) {
    if (m->count <= MEMO_ENTRIES - MEMO_PER_WALK) return;
    while (m->count > MEMO_ENTRIES / 2) {
        Py_ssize_t oldest = 0;
        for (Py_ssize_t k = 1; k < m->count; k++) {
            const MemoEntry *a = &m->entries[k], *b = &m->entries[oldest];
            int a_identity = a->shape[0] < 0, b_identity = b->shape[0] < 0;
            if (a_identity != b_identity ? a_identity : a->last_used < b->last_used) oldest = k;
        }
        memo_free_entry(&m->entries[oldest]);
        m->entries[oldest] = m->entries[--m->count];
    }
}

/* Whether live state `state` is free text or leads there (see the memo's comment above): 1 yes,
 * 0 no, FAILED with an exception set on error. */
static int leads_to_free_text(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t state) {
    for (int hops = 0;; hops++) {
        StepInfo *info = step_info(w, x, core, v, state);
        if (!info) return PyErr_Occurred() ? FAILED : 0;
        int common = 0;
        for (int k = 0; k < 4; k++) common += __builtin_popcountll(info->bytes[k]);
        if (info->target < 0 || common < SHAPE_LOOP_BYTES) return 0;
        if (info->target == state) return 1;
        if (hops == SHAPE_HOPS) return 0;
        state = info->target;
    }
}

/* The shape of live state `state` into `w->shape` (its length), -1 where it does not lead to free
 * text (`leads_to_free_text`) or reaches more than SHAPE_STATES states, FAILED with an exception
 * set on error. Rows not known yet are filled. Per state in order: its flags (may end the frame,
 * has stacks), then its row as runs of equal targets, each run's last byte and its target's number
 * (0: dead). */
static Py_ssize_t state_shape(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t state) {
    int free_text = leads_to_free_text(w, x, core, v, state);
    if (free_text <= 0) return free_text == FAILED ? FAILED : -1;
    int32_t slot_state[SHAPE_SLOTS], slot_number[SHAPE_SLOTS], queue[SHAPE_STATES];
    for (int k = 0; k < SHAPE_SLOTS; k++) slot_state[k] = -1;
    int known = 0;
    Py_ssize_t len = 0;
    queue[known++] = state;
    slot_state[((uint32_t)state * 2654435761u) & (SHAPE_SLOTS - 1)] = state;
    slot_number[((uint32_t)state * 2654435761u) & (SHAPE_SLOTS - 1)] = 0;
    for (int q = 0; q < known; q++) {
        int32_t s = queue[q];
        const int32_t *row = v->table + (Py_ssize_t)s * 256;
        for (int b = 0; b < 256; b++) {
            if (row[b] != UNKNOWN) continue;
            if (core_step(x, core, v, s, (uint8_t)b) == FAILED) return FAILED;
            row = v->table + (Py_ssize_t)s * 256; /* (the view may have moved) */
        }
        w->shape[len++] = v->flags[s] | v->has_stacks[s] << 1;
        for (int b = 0; b < 256; b++) {
            int32_t t = row[b], number = 0;
            if (t >= 0) {
                size_t i = ((uint32_t)t * 2654435761u) & (SHAPE_SLOTS - 1);
                while (slot_state[i] >= 0 && slot_state[i] != t) i = (i + 1) & (SHAPE_SLOTS - 1);
                if (slot_state[i] < 0) {
                    if (known == SHAPE_STATES) return -1;
                    slot_state[i] = t;
                    slot_number[i] = known;
                    queue[known++] = t;
                }
                number = slot_number[i] + 1;
            }
            if (b == 255 || row[b + 1] != t) w->shape[len++] = b << 8 | number;
        }
    }
    return len;
}

/* The shape of a state known by its core and id: a record no automaton's shape begins with. */
static Py_ssize_t identity_shape(PositionWalker *w, const Interner *x, int32_t state) {
    w->shape[0] = -1;
    w->shape[1] = (int32_t)(uint32_t)x->serial;
    w->shape[2] = (int32_t)(uint32_t)(x->serial >> 32);
    w->shape[3] = state;
    return 4;
}

static uint64_t shape_hash(const int32_t *shape, Py_ssize_t len) {
    uint64_t h = 1469598103934665603ull;
    for (Py_ssize_t k = 0; k < len; k++) h = (h ^ (uint32_t)shape[k]) * 1099511628211ull;
    return h;
}

/* The memo's entry of the shape in `w->shape` walked with `follow_bits` (NULL: exits not kept),
 * made empty if new; NULL if the memo is full (no exception: the caller walks directly) or on
 * memory error. */
static MemoEntry *memo_entry(PositionWalker *w, const Interner *x, Py_ssize_t shape_len, const uint64_t *follow_bits) {
    WalkMemo *m = &w->memo;
    uint64_t hash = shape_hash(w->shape, shape_len);
    for (Py_ssize_t k = 0; k < m->count; k++) {
        MemoEntry *e = &m->entries[k];
        if (e->hash == hash && e->shape_len == shape_len && e->has_follow == (follow_bits != NULL) &&
            (!follow_bits || !memcmp(e->follow, follow_bits, sizeof(e->follow))) &&
            !memcmp(e->shape, w->shape, (size_t)shape_len * sizeof(int32_t))) {
            e->last_used = ++m->clock;
            w->memo_shared_hits += e->made_by != x->serial;
            return e;
        }
    }
    if (m->count == MEMO_ENTRIES) return NULL;
    MemoEntry *e = &m->entries[m->count];
    memset(e, 0, sizeof(*e));
    e->shape = (int32_t *)malloc((size_t)shape_len * sizeof(int32_t));
    e->rows = (uint64_t *)calloc((size_t)(w->rows / 64 + 1), sizeof(uint64_t));
    e->words = (uint32_t *)calloc((size_t)w->nwords, sizeof(uint32_t));
    if (!e->shape || !e->rows || !e->words) {
        memo_free_entry(e);
        return (MemoEntry *)PyErr_NoMemory();
    }
    memcpy(e->shape, w->shape, (size_t)shape_len * sizeof(int32_t));
    e->shape_len = shape_len;
    e->hash = hash;
    e->id = ++m->next_id;
    e->made_by = x->serial;
    e->last_used = ++m->clock;
    e->has_follow = follow_bits != NULL;
    if (follow_bits) memcpy(e->follow, follow_bits, sizeof(e->follow));
    m->count++;
    return e;
}

/* The memo's entry for the walks below first bytes that lead to live state `state` of `x`'s core
 * (by its shape, else by its identity: `memo_entry`), through the record of states seen; NULL as
 * `memo_entry`, or with an exception set where the shape could not be made. */
static MemoEntry *memo_entry_of(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, int32_t state,
                                const uint64_t *follow_bits) {
    WalkMemo *m = &w->memo;
    uint64_t key = (x->serial * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)(uint32_t)state * 0xC2B2AE3D27D4EB4Full);
    SeenState *seen = &m->seen[(key >> 40) % SEEN_STATES];
    if (seen->entry_id && seen->serial == x->serial && seen->state == state &&
        seen->has_follow == (follow_bits != NULL) && (!follow_bits || !memcmp(seen->follow, follow_bits, sizeof(seen->follow)))) {
        for (Py_ssize_t k = 0; k < m->count; k++) {
            MemoEntry *e = &m->entries[k];
            if (e->id != seen->entry_id) continue;
            e->last_used = ++m->clock;
            w->memo_shared_hits += e->made_by != x->serial;
            return e;
        }
    }
    Py_ssize_t shape_len = state_shape(w, x, core, v, state);
    w->memo_shapes++;
    if (shape_len == FAILED) return NULL;
    if (shape_len < 0) shape_len = identity_shape(w, x, state);
    MemoEntry *e = memo_entry(w, x, shape_len, follow_bits);
    if (e) {
        seen->serial = x->serial;
        seen->state = state;
        seen->has_follow = follow_bits != NULL;
        memset(seen->follow, 0, sizeof(seen->follow));
        if (follow_bits) memcpy(seen->follow, follow_bits, sizeof(seen->follow));
        seen->entry_id = e->id;
    }
    return e;
}

/* Where a walk records what it finds: accepted tokens into `words`, and per row either a stamp
 * (`w->ok_stamp`, a walk of its own) or a bit of a memo entry's `rows`; exits into `exits` as
 * (root, node, depth) triples (every token below the node's children leaves the frame after
 * `depth` bytes), or (root, -1 - node, code) for a subtree taken whole whose longer tokens leave it
 * where the chain ends (`bulk_exit_at`). */
typedef struct {
    uint32_t *words;
    uint64_t *rows; /* NULL: stamps */
    IntBuf *exits;
    int32_t root;
    int keep_exits;
    const uint64_t *follow_bits; /* the bytes exits may continue with, for the bulk test (NULL: none kept) */
} Sink;

static inline void sink_ok(PositionWalker *w, const Sink *k, int32_t row) {
    const int32_t *order = w->v[PW_ORDER].buf;
    int32_t id = order[row];
    k->words[id >> 5] |= (uint32_t)1 << (id & 31);
    if (k->rows) {
        k->rows[row >> 6] |= (uint64_t)1 << (row & 63);
    } else {
        w->ok_stamp[row] = w->gen;
    }
}

/* A subtree's exit (`Sink`) counts characters rather than bytes. */
#define CHAR_EXIT (1 << 30)

/* Where token `row` goes on past its first `chars` characters from byte `from` (its bytes from
 * there that are not continuation bytes: a token that begins more of them). */
static int32_t char_offset(const PositionWalker *w, int32_t row, int32_t from, int32_t chars) {
    const uint8_t *token = (const uint8_t *)w->v[PW_MATRIX].buf + (Py_ssize_t)row * w->width;
    int32_t at = from;
    for (int32_t seen = 0;; at++) {
        if ((token[at] & 0xC0) != 0x80 && seen++ == chars) return at;
    }
}

/* The most a token below bulk node `node` may hold of what `code` counts, to be accepted: `code`
 * bytes below the node's prefix, or with CHAR_EXIT that many characters begun there. */
static inline int32_t bulk_limit(const PositionWalker *w, int32_t node, int32_t code) {
    const int32_t *depth = w->v[PW_DEPTH].buf;
    if (code & CHAR_EXIT) return w->bulk_chars_above[w->bulk_of[node]] + (code & ~CHAR_EXIT);
    return depth[node] - 1 + code;
}

/* Whether token `row` holds more than `limit` (`bulk_limit`) of what `code` counts. */
static inline int bulk_longer(const PositionWalker *w, int32_t code, int32_t limit, int32_t row) {
    const int32_t *length = w->v[PW_LENGTH].buf;
    return code & CHAR_EXIT ? w->row_chars[row] > limit : length[row] > limit;
}

/* Where token `row` leaves the frame in the exit (root, -1 - `node`, `code`) of a subtree taken whole
 * (`limit` from `bulk_limit`), or -1 where it does not (it is accepted): past the chain's end. */
static int32_t bulk_exit_at(const PositionWalker *w, int32_t node, int32_t code, int32_t limit, int32_t row) {
    const int32_t *depth = w->v[PW_DEPTH].buf;
    if (!bulk_longer(w, code, limit, row)) return -1;
    return code & CHAR_EXIT ? char_offset(w, row, depth[node] - 1, code & ~CHAR_EXIT) : limit;
}

/* ---- following a literal in the RTN itself ----
 *
 * A key's spelling (a member's `"name":`) is a chain of RTN states that call nothing, each taking
 * a byte or a few. Stepping the parser through it interned a parser state per byte (a row of 256
 * transitions each, a closure per distinct target), most of a first key mask's parser states,
 * though the trie below each of them dies at once but along the spelling. Where the path's parser
 * state is one stack node over the bottom of its frame, at such a chain state, and its row is not
 * known, the walk follows the RTN instead: a node (q, bottom) at a state without calls goes on to
 * (trans[q][b], bottom), which may end the frame where it is accepting and lives on where it has
 * transitions, exactly what the closure of that node gives. The walk comes back to parser states
 * where the chain reaches a state with calls or many transitions (`cm_bottom_state`). */
#define RTN_CHAIN_BYTES 4

/* Whether RTN state `q` is part of a chain: no calls, at most RTN_CHAIN_BYTES bytes taken. Kept
 * per state (`chain_kind`): a state met along many paths had its row counted at every step. A
 * chain state that became a parser state (where a path left the chain) is no chain any more: its
 * parser state's row is read from then on (a closure per path that reached it cost more than the
 * rows saved, where many paths reach a short chain). Where the array cannot be made, no state is
 * taken for one (the parser steps, as before). */
static int rtn_chain(Interner *x, int32_t q) {
    if (!x->chain_kind && !(x->chain_kind = (uint8_t *)calloc((size_t)x->states, 1))) return 0;
    if (!x->chain_kind[q]) {
        const int32_t *row = (const int32_t *)x->trans.buf + (Py_ssize_t)q * 256;
        int live = 0;
        for (int b = 0; b < 256; b++) live += row[b] >= 0;
        x->chain_kind[q] = x->call_lo[q] == x->call_lo[q + 1] && live <= RTN_CHAIN_BYTES ? 2 : 1;
    }
    return x->chain_kind[q] == 2;
}

/* Set depth `d` of the path to parser state `state` (live), followed in the RTN from there on
 * where `state` is one node over a bottom at a chain state and its row is not known yet. */
static void path_set(PositionWalker *w, Interner *x, const CoreView *v, Py_ssize_t d, int32_t state) {
    w->path[d] = state;
    w->rtn_path[d] = -1;
    if (x->lazy || x->alphabet != 256 || state >= x->st_count || v->table[(Py_ssize_t)state * 256] != UNKNOWN ||
        x->st_len[state] != 1)
        return;
    int32_t node_id = x->st_ids[x->st_at[state]];
    if (x->npn[node_id] != 1 || x->par[x->npo[node_id]] >= 0 || !rtn_chain(x, x->nq[node_id])) return;
    w->path[d] = DEAD;
    w->rtn_path[d] = x->nq[node_id];
    w->rtn_bottom[d] = x->par[x->npo[node_id]];
}

/* The scan of the preorder nodes `begin`..`stop` (a run of whole subtrees whose parent's state is
 * `w->path[depth[begin] - 1]`), recording into `k`; 0, or -1 on error. */
static int walk_nodes(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, Py_ssize_t begin, Py_ssize_t stop,
                      const Sink *k) {
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *depth = w->v[PW_DEPTH].buf, *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf;
    const int32_t *token = w->v[PW_TOKEN].buf, *end = w->v[PW_END].buf, *length = w->v[PW_LENGTH].buf;
    const int32_t *trans = (const int32_t *)x->trans.buf;
    for (Py_ssize_t i = begin; i < stop;) {
        int32_t d = depth[i];
        int32_t bulk = w->bulk_of[i], q = w->rtn_path[d - 1];
        if (bulk >= 0 && q < 0) {
            int32_t height = w->bulk_height[bulk], chars = -1;
            int exit_at_end = 0;
            int32_t reach = bulk_reach(w, x, core, v, w->path[d - 1], w->bulk_bytes + 4 * (Py_ssize_t)bulk, height,
                                       k->keep_exits ? k->follow_bits : NULL, w->bulk_utf8[bulk], &chars, &exit_at_end);
            if (reach == -2) return -1;
            if (reach >= 0) {
                int32_t code = chars >= 0 ? CHAR_EXIT | chars : reach; /* the tokens below accepted (`bulk_longer`) */
                int32_t limit = bulk_limit(w, (int32_t)i, code);
                if (chars < 0 && reach == height) {
                    for (int32_t row = lo[i]; row < hi[i]; row++) sink_ok(w, k, row);
                } else if (chars < 0) {
                    for (int32_t row = lo[i]; row < hi[i]; row++) {
                        if (length[row] <= limit) sink_ok(w, k, row);
                    }
                } else {
                    for (int32_t row = lo[i]; row < hi[i]; row++) {
                        if (w->row_chars[row] <= limit) sink_ok(w, k, row);
                    }
                }
                if (exit_at_end &&
                    (buf_push(k->exits, k->root) || buf_push(k->exits, (int32_t)(-1 - i)) || buf_push(k->exits, code)))
                    return -1;
                i = end[i];
                continue;
            }
        }
        int32_t next = DEAD, in_rtn = -1;
        int ends, lives;
        if (q >= 0) { /* (a chain followed in the RTN) */
            int32_t t = trans[(Py_ssize_t)q * 256 + byte[i]];
            if (t >= 0 && !rtn_chain(x, t)) {
                /* the chain ends: its state becomes a parser state, whose row the siblings read
                 * (a closure per node leaving the chain took longer where many paths reach it) */
                int32_t state = cm_bottom_state(x, core, q, w->rtn_bottom[d - 1]);
                if (state == FAILED || core_view(x, core, v)) return -1;
                if (state < 0) return cm_bad("a live chain state without a parser state");
                x->chain_kind[q] = 1; /* (from now on stepped as that parser state, whose row is filled) */
                w->path[d - 1] = state;
                w->rtn_path[d - 1] = -1;
                continue;
            }
            in_rtn = t;
        } else {
            next = v->table[(Py_ssize_t)w->path[d - 1] * 256 + byte[i]];
            if (next == UNKNOWN || next >= v->states || next < DEAD) {
                next = core_step(x, core, v, w->path[d - 1], byte[i]);
                if (next == FAILED) return -1;
            }
        }
        if (q >= 0 && in_rtn < 0) { /* (no transition) */
            i = end[i];
            continue;
        }
        if (in_rtn >= 0) {
            ends = x->accepting[in_rtn];
            lives = x->scanning[in_rtn];
        } else {
            ends = next >= 0 && v->flags[next];
            lives = next >= 0 && v->has_stacks[next];
        }
        if (in_rtn < 0 ? next < 0 : !ends && !lives) {
            i = end[i];
            continue;
        }
        if (token[i] >= 0) sink_ok(w, k, token[i]);
        if (k->keep_exits && ends && end[i] > i + 1 &&
            (buf_push(k->exits, k->root) || buf_push(k->exits, (int32_t)i) || buf_push(k->exits, d)))
            return -1;
        if (!lives) {
            i = end[i];
        } else if (in_rtn >= 0) {
            w->path[d] = DEAD;
            w->rtn_path[d] = in_rtn;
            w->rtn_bottom[d] = w->rtn_bottom[d - 1];
            i++;
        } else {
            path_set(w, x, v, d, next);
            i++;
        }
    }
    return 0;
}

/* Walk the subtrees below the roots `r` of `group` (whose byte led to `state`, of entry `e`'s shape) that
 * the entry has not walked yet. */
static int memo_fill(PositionWalker *w, Interner *x, PyObject *core, CoreView *v, MemoEntry *e, int32_t state,
                     const int32_t *group, Py_ssize_t count) {
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
        if (k.keep_exits && v->flags[state] && end[i] > i + 1 &&
            (buf_push(&e->exits, r) || buf_push(&e->exits, i) || buf_push(&e->exits, 1)))
            return -1;
        if (!v->has_stacks[state] || end[i] <= i + 1) continue;
        path_set(w, x, v, 1, state);
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

/* classify(interner, core, start, follow, max_uncertain, use_memo) -> (words, rows, residual_of, residual_rows,
 * residual_starts, residual_lengths): the scan described above from parser state `start`; `follow`
 * (256 bytes of 0/1) are the bytes a residual may begin with, or None where the frame has no caller
 * (no token is then uncertain). `words` is the uint32 bitmask row of the accepted tokens' ids; the
 * others are int32 arrays: the uncertain tokens' rows and the distinct residual each continues
 * with, and per residual the row it is a tail of, where it starts, and its length; or None alone
 * where more than `max_uncertain` tokens leave the frame (they are then not listed). From a real
 * parse's state with `follow` None, `words` is that state's mask of the vocabulary. With `use_memo`
 * the walks below first bytes that lead many tokens to one state are kept by the state's shape,
 * for later positions, of any grammar, that reach a state of that shape. */
static PyObject *pwalker_classify(PositionWalker *w, PyObject *args) {
    PyObject *interner, *core, *follow_obj;
    int start, use_memo;
    Py_ssize_t max_uncertain;
    if (!PyArg_ParseTuple(args, "OOiOnp", &interner, &core, &start, &follow_obj, &max_uncertain, &use_memo)) return NULL;
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
    if (w->busy) {
        PyErr_SetString(PyExc_RuntimeError, "PositionWalker.classify re-entered (take the core's lock)");
        return NULL;
    }
    const uint8_t *byte = w->v[PW_BYTE].buf;
    const int32_t *lo = w->v[PW_LO].buf, *hi = w->v[PW_HI].buf, *token = w->v[PW_TOKEN].buf, *end = w->v[PW_END].buf;
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
        cm_bad("parser state out of range");
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
    for (Py_ssize_t d = 0; d <= w->max_depth; d++) { /* (every entry a valid state) */
        w->path[d] = start;
        w->rtn_path[d] = -1;
    }
    uint64_t follow_bits[4] = {0, 0, 0, 0};
    for (int b = 0; follow && b < 256; b++) {
        if (follow[b]) follow_bits[b >> 6] |= (uint64_t)1 << (b & 63);
    }
    if (use_memo) memo_room(&w->memo);
    Sink direct = {words, NULL, &exits, -1, follow != NULL, follow ? follow_bits : NULL};
    /* the first byte of every root, then its subtree: directly, or through the memo where the roots
     * that reach one state hold many tokens. The live roots are grouped by the state their byte
     * leads to, groups in the order of their first root: `members[first[k]:first[k + 1]]`. */
    int32_t target[256], group_of[256], group_target[256], group_size[256], group_rows[256];
    int32_t first[257], members[256];
    Py_ssize_t groups = 0;
    for (Py_ssize_t r = 0; r < w->nroots; r++) {
        target[r] = core_step(x, core, &v, start, byte[w->roots[r]]);
        if (target[r] == FAILED) goto done;
        group_of[r] = -1;
        if (target[r] < 0) continue;
        Py_ssize_t k = 0;
        while (k < groups && group_target[k] != target[r]) k++;
        if (k == groups) {
            group_target[groups] = target[r];
            group_size[groups] = group_rows[groups] = 0;
            groups++;
        }
        group_of[r] = (int32_t)k;
        group_size[k]++;
        group_rows[k] += w->root_rows[r];
    }
    first[0] = 0;
    for (Py_ssize_t k = 0; k < groups; k++) first[k + 1] = first[k] + group_size[k];
    int32_t placed[256] = {0};
    for (Py_ssize_t r = 0; r < w->nroots; r++) {
        int32_t k = group_of[r];
        if (k >= 0) members[first[k] + placed[k]++] = (int32_t)r;
    }
    for (Py_ssize_t k = 0; k < groups; k++) {
        const int32_t *group = members + first[k];
        Py_ssize_t count = group_size[k], rows = group_rows[k];
        int32_t r = group[0];
        MemoEntry *e = NULL;
        if (use_memo && rows >= MEMO_MIN_ROWS && v.has_stacks[target[r]]) {
            e = memo_entry_of(w, x, core, &v, target[r], follow ? follow_bits : NULL);
            if (!e && PyErr_Occurred()) goto done;
        }
        if (e) {
            if (memo_fill(w, x, core, &v, e, target[r], group, count) || memo_read(w, e, group, count, words))
                goto done;
            used[nused] = e;
            for (Py_ssize_t q = 0; q < e->exits.size; q += 3) {
                int32_t root = e->exits.data[q];
                if (group_of[root] == k && (buf_push(&exits, (int32_t)(256 + nused)) ||
                                            buf_push(&exits, e->exits.data[q + 1]) || buf_push(&exits, e->exits.data[q + 2])))
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
            path_set(w, x, &v, 1, t);
            if (walk_nodes(w, x, core, &v, i + 1, end[i], &direct)) goto done;
        }
    }
    /* the exits: the tokens below each exit node, by child, and the tokens that exit alone, where
     * the residual's first byte may follow the frame and the token is not accepted outright (rows
     * read from the memo entry that holds the exit's subtree, else from this walk's stamps) */
    Py_ssize_t count = 0;
    const uint8_t *matrix = w->v[PW_MATRIX].buf;
    for (Py_ssize_t k = 0; follow && k < exits.size && count <= max_uncertain; k += 3) {
        int32_t i = exits.data[k + 1];
        if (i < 0) { /* a subtree's exits */
            int32_t node = -1 - i, code = exits.data[k + 2], limit = bulk_limit(w, node, code);
            for (int32_t row = lo[node]; row < hi[node]; row++) {
                int32_t at = bulk_exit_at(w, node, code, limit, row);
                count += at >= 0 && follow[matrix[(Py_ssize_t)row * w->width + at]];
            }
            continue;
        }
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
        if (i < 0) { /* a subtree's exits (`d`: its code) */
            int32_t node = -1 - i, limit = bulk_limit(w, node, d);
            for (int32_t row = lo[node]; row < hi[node]; row++) {
                int32_t at = bulk_exit_at(w, node, d, limit, row);
                if (at >= 0 && follow[matrix[(Py_ssize_t)row * w->width + at]] &&
                    list_uncertain(w, &map, unc, ok_rows, gen, row, row + 1, at))
                    goto done;
            }
            continue;
        }
        for (int32_t c = i + 1; c < end[i]; c = end[c]) {
            if (follow[byte[c]] && list_uncertain(w, &map, unc, ok_rows, gen, lo[c], hi[c], d)) goto done;
        }
    }
    result = PyTuple_New(6);
    if (!result) goto done;
    PyTuple_SET_ITEM(result, 0, words_out);
    words_out = NULL;
    for (int k = 0; k < 5; k++) {
        PyObject *part = cm_buf_bytes(&unc[k]);
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
 * `residual_of[k]` stays alive to its end (`uncertain.resolve_residuals`). */
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
    if (!x || cm_need(&b[0], sizeof(int32_t), residuals, "residual_rows") ||
        cm_need(&b[1], sizeof(int32_t), residuals, "residual_starts") ||
        cm_need(&b[2], sizeof(int32_t), residuals, "residual_lengths") || cm_need(&b[3], sizeof(int32_t), tokens, "token_ids") ||
        cm_need(&b[4], sizeof(int32_t), tokens, "residual_of") || cm_need(&b[5], sizeof(uint32_t), w->nwords, "words") ||
        core_view(x, core, &v))
        goto done;
    if (start < 0 || start >= v.states) {
        cm_bad("parser state out of range");
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
            state = step_as(x, core, &v, state, tail[k], 1);
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

static PyObject *pwalker_get_memo_entries(PositionWalker *w, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(w->memo.count);
}

static PyObject *pwalker_get_memo_shared_hits(PositionWalker *w, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(w->memo_shared_hits);
}

static PyObject *pwalker_get_memo_shapes(PositionWalker *w, void *Py_UNUSED(closure)) {
    return PyLong_FromSsize_t(w->memo_shapes);
}

/* clear_memo(): forget the walks below first bytes (the next walks make their own). */
static PyObject *pwalker_clear_memo(PositionWalker *w, PyObject *Py_UNUSED(args)) {
    if (w->busy) {
        PyErr_SetString(PyExc_RuntimeError, "PositionWalker.clear_memo during a walk");
        return NULL;
    }
    memo_clear(&w->memo);
    Py_RETURN_NONE;
}

static PyMethodDef pwalker_methods[] = {
    {"clear_memo", (PyCFunction)pwalker_clear_memo, METH_NOARGS, "clear_memo(): forget the walks below first bytes"},
    {"classify", (PyCFunction)pwalker_classify, METH_VARARGS,
     "classify(interner, core, start, follow, max_uncertain, use_memo) -> (words, rows, residual_of, residual_rows, "
     "residual_starts, residual_lengths) or (words, None): a position's accepted and uncertain tokens from its "
     "frame-local parser state"},
    {"resolve", (PyCFunction)pwalker_resolve, METH_VARARGS,
     "resolve(interner, core, start, residual_rows, residual_starts, residual_lengths, token_ids, residual_of, "
     "words): set the bits of the uncertain tokens whose residual the parser accepts from state start"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pwalker_getset[] = {
    {"memo_entries", (getter)pwalker_get_memo_entries, NULL, "how many states' walks below first bytes it keeps", NULL},
    {"memo_shared_hits", (getter)pwalker_get_memo_shared_hits, NULL,
     "how many times a walk read what a walk of another parser core kept", NULL},
    {"memo_shapes", (getter)pwalker_get_memo_shapes, NULL,
     "how many states' shapes its walks worked out (a state met again is not worked out again)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject cm_PositionWalkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "codemask.engine._native.PositionWalker",
    .tp_basicsize = sizeof(PositionWalker),
    .tp_dealloc = (destructor)pwalker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "PositionWalker(byte, depth, lo, hi, token, end, order, lengths, suffix_start, suffix_ids, matrix, "
              "width, words): one vocabulary's trie for classifying byte-level grammar positions in C",
    .tp_methods = pwalker_methods,
    .tp_getset = pwalker_getset,
    .tp_new = pwalker_new,
};
