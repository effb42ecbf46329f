/* ---------------------------------------------------------------------------------------------
 * The bytes that may follow each rule (`automaton.RTN.follow_bytes`).
 *
 * follow_bytes(trans, accepting, call_lo, callee, ret, rule_start, state_rule, rules, symbols) -> bytes: per
 * rule, 256 bytes of 0/1. First the symbols each state's frame can take before it ends and whether it
 * can end without one (`RTN.call_first_sets`: a worklist over the states that make calls), then per
 * callee what its return states take first, and where a return state may end its frame, what
 * follows the calling rule (a worklist over the rules). What the Python worklists did in tens of
 * milliseconds for a grammar of ten thousand calls, at a large schema's first mask.
 *
 * rule_graph(owner, callee, tail, sizes, limit) -> (callee_lo, callees, unshared, with_callers): the
 * rules' call graph as `shared_positions.RuleSignatures` and the position classifier read it, made
 * at a grammar's first mask (in Python a millisecond for a large schema, half of it for a small
 * one, where the whole first mask is a few).
 * ------------------------------------------------------------------------------------------- */

#include "_native.h"

PyObject *cm_follow_bytes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer v[7], known = {0};
    Py_ssize_t rules;
    PyObject *symbols;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*nO", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &rules, &symbols))
        return NULL;
    PyObject *result = NULL;
    uint64_t *first = NULL, *follow = NULL;
    uint8_t *nullable = NULL, *queued = NULL;
    int32_t *users_lo = NULL, *users = NULL, *todo = NULL, *pass_lo = NULL, *pass = NULL, *owner_of = NULL;
    Py_ssize_t states = v[1].len, calls = v[3].len / (Py_ssize_t)sizeof(int32_t);
    if (cm_need(&v[0], sizeof(int32_t), states * 256, "trans") || cm_need(&v[2], sizeof(int64_t), states + 1, "call_lo") ||
        cm_need(&v[3], sizeof(int32_t), calls, "callee") || cm_need(&v[4], sizeof(int32_t), calls, "ret") ||
        cm_need(&v[5], sizeof(int32_t), rules, "rule_start") || cm_need(&v[6], sizeof(int32_t), states, "state_rule"))
        goto done;
    /* `symbols`: per state the bytes it takes, four uint64 words (`RTN.first_bytes`, made with the
     * rule automata), or None: then read from the rows of `trans`, a kilobyte each, most of the time
     * of a large schema's first key mask (1.6 ms for 18,000 states) */
    if (symbols != Py_None &&
        (PyObject_GetBuffer(symbols, &known, PyBUF_C_CONTIGUOUS) || cm_need(&known, 4 * sizeof(uint64_t), states, "symbols")))
        goto done;
    const int32_t *trans = v[0].buf, *callee = v[3].buf, *ret = v[4].buf, *rule_start = v[5].buf, *state_rule = v[6].buf;
    const uint8_t *accepting = v[1].buf;
    const int64_t *call_lo = v[2].buf;
    if (call_lo[0] != 0 || call_lo[states] != calls) {
        cm_bad("call_lo: not the bounds of the calls");
        goto done;
    }
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (callee[k] < 0 || callee[k] >= rules || ret[k] < 0 || ret[k] >= states) {
            cm_bad("a call to a rule or a return to a state out of range");
            goto done;
        }
    }
    for (Py_ssize_t r = 0; r < rules; r++) {
        if (rule_start[r] < 0 || rule_start[r] >= states) {
            cm_bad("rule_start: a state out of range");
            goto done;
        }
    }
    for (Py_ssize_t q = 0; q < states; q++) {
        if (state_rule[q] < 0 || state_rule[q] >= rules || call_lo[q] > call_lo[q + 1]) {
            cm_bad("state_rule or call_lo out of range");
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
        if (known.buf) {
            memcpy(first + 4 * q, (const uint64_t *)known.buf + 4 * q, 4 * sizeof(uint64_t));
            continue;
        }
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
    if (known.obj) PyBuffer_Release(&known);
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

/* Per rule: its distinct callees in ascending order (`callee_lo` bounds, int32 [rules + 1]), whether
 * it is recursive, calls a recursive rule or has more than `limit` states with those of the rules it
 * calls, counted once per callee and summed down the call graph (`unshared`, 0/1 bytes), and whether
 * its frame can sit on another rule's (`with_callers`: called other than in tail position, or in
 * tail position by such a rule). The input per call: the calling rule, the callee and whether the
 * call is a tail call (int32, int32, uint8 arrays of one length); `sizes`: int32 states per rule.
 * The depth-first search of `automaton._unshared_rules`, with the same outcome. */
PyObject *cm_rule_graph(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer v[4];
    Py_ssize_t limit;
    memset(v, 0, sizeof(v));
    if (!PyArg_ParseTuple(args, "y*y*y*y*n", &v[0], &v[1], &v[2], &v[3], &limit)) return NULL;
    PyObject *result = NULL, *lo_out = NULL, *ids_out = NULL, *unshared_out = NULL, *callers_out = NULL;
    int32_t *pair_lo = NULL, *pairs = NULL, *tail_lo = NULL, *tails = NULL, *at = NULL, *stack = NULL;
    int64_t *total = NULL;
    uint8_t *color = NULL;
    Py_ssize_t calls = v[1].len / (Py_ssize_t)sizeof(int32_t), rules = v[3].len / (Py_ssize_t)sizeof(int32_t);
    if (cm_need(&v[0], sizeof(int32_t), calls, "owner") || cm_need(&v[1], sizeof(int32_t), calls, "callee") ||
        cm_need(&v[2], 1, calls, "tail") || cm_need(&v[3], sizeof(int32_t), rules, "sizes"))
        goto done;
    const int32_t *owner = v[0].buf, *callee = v[1].buf, *sizes = v[3].buf;
    const uint8_t *tail = v[2].buf;
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (owner[k] < 0 || owner[k] >= rules || callee[k] < 0 || callee[k] >= rules) {
            cm_bad("a call from or to a rule out of range");
            goto done;
        }
    }
    pair_lo = (int32_t *)calloc((size_t)rules + 1, sizeof(int32_t));
    tail_lo = (int32_t *)calloc((size_t)rules + 1, sizeof(int32_t));
    pairs = (int32_t *)malloc((size_t)(calls + 1) * sizeof(int32_t));
    tails = (int32_t *)malloc((size_t)(calls + 1) * sizeof(int32_t));
    at = (int32_t *)malloc((size_t)(rules + 1) * sizeof(int32_t));
    stack = (int32_t *)malloc((size_t)(calls + rules + 1) * sizeof(int32_t));
    total = (int64_t *)malloc((size_t)(rules + 1) * sizeof(int64_t));
    color = (uint8_t *)calloc((size_t)rules + 1, 1);
    lo_out = PyBytes_FromStringAndSize(NULL, (rules + 1) * (Py_ssize_t)sizeof(int32_t));
    unshared_out = PyBytes_FromStringAndSize(NULL, rules);
    callers_out = PyBytes_FromStringAndSize(NULL, rules);
    if (!pair_lo || !tail_lo || !pairs || !tails || !at || !stack || !total || !color) {
        PyErr_NoMemory();
        goto done;
    }
    if (!lo_out || !unshared_out || !callers_out) goto done;
    /* the calls grouped by calling rule (counting sorts), all and tail calls apart */
    for (Py_ssize_t k = 0; k < calls; k++) {
        pair_lo[owner[k] + 1]++;
        if (tail[k]) tail_lo[owner[k] + 1]++;
    }
    for (Py_ssize_t r = 0; r < rules; r++) {
        pair_lo[r + 1] += pair_lo[r];
        tail_lo[r + 1] += tail_lo[r];
    }
    memcpy(at, pair_lo, (size_t)rules * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < calls; k++) pairs[at[owner[k]]++] = callee[k];
    memcpy(at, tail_lo, (size_t)rules * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (tail[k]) tails[at[owner[k]]++] = callee[k];
    }
    for (Py_ssize_t r = 0; r < rules; r++) at[r] = -1; /* now: the last rule that called each rule */
    /* each rule's distinct callees, ascending, in place: repeats dropped by a stamp per callee (a
     * large schema's object rule makes hundreds of calls), then sorted */
    int32_t *lo = (int32_t *)PyBytes_AS_STRING(lo_out);
    Py_ssize_t kept = 0;
    lo[0] = 0;
    for (Py_ssize_t r = 0; r < rules; r++) {
        Py_ssize_t first = kept;
        for (int32_t i = pair_lo[r]; i < pair_lo[r + 1]; i++) {
            if (at[pairs[i]] == (int32_t)r) continue;
            at[pairs[i]] = (int32_t)r;
            pairs[kept++] = pairs[i];
        }
        cm_sort_int32(pairs + first, kept - first);
        lo[r + 1] = (int32_t)kept;
    }
    ids_out = PyBytes_FromStringAndSize((const char *)pairs, kept * (Py_ssize_t)sizeof(int32_t));
    if (!ids_out) goto done;
    /* unshared: a depth-first search, callees finished first; colour 1 = on the current path */
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(unshared_out);
    for (Py_ssize_t r = 0; r < rules; r++) {
        total[r] = sizes[r];
        out[r] = sizes[r] > limit;
    }
    for (Py_ssize_t root = 0; root < rules; root++) {
        if (color[root]) continue;
        Py_ssize_t top = 0;
        stack[top++] = (int32_t)root;
        while (top) {
            int32_t r = stack[top - 1];
            if (color[r] == 0) {
                color[r] = 1;
                for (int32_t i = lo[r]; i < lo[r + 1]; i++) {
                    int32_t c = pairs[i];
                    if (color[c] == 1) {
                        out[r] = 1; /* a call back into the path: recursion */
                    } else if (color[c] == 0) {
                        stack[top++] = c; /* (at most one entry per call and one per root) */
                    }
                }
                continue;
            }
            top--;
            if (color[r] == 2) continue;
            color[r] = 2;
            for (int32_t i = lo[r]; i < lo[r + 1]; i++) {
                int32_t c = pairs[i];
                total[r] += total[c];
                if (total[r] > ((int64_t)1 << 40)) total[r] = (int64_t)1 << 40; /* (saturates: past any limit) */
                out[r] |= out[c];
            }
            out[r] |= total[r] > limit;
        }
    }
    /* with callers: every callee of a call that is not a tail call, then the tail callees of those */
    uint8_t *found = (uint8_t *)PyBytes_AS_STRING(callers_out);
    memset(found, 0, (size_t)rules);
    Py_ssize_t top = 0;
    for (Py_ssize_t k = 0; k < calls; k++) {
        if (!tail[k] && !found[callee[k]]) {
            found[callee[k]] = 1;
            stack[top++] = callee[k];
        }
    }
    while (top) {
        int32_t r = stack[--top];
        for (int32_t i = tail_lo[r]; i < tail_lo[r + 1]; i++) {
            if (!found[tails[i]]) {
                found[tails[i]] = 1;
                stack[top++] = tails[i];
            }
        }
    }
    result = PyTuple_Pack(4, lo_out, ids_out, unshared_out, callers_out);
done:
    for (int i = 0; i < 4; i++) PyBuffer_Release(&v[i]);
    Py_XDECREF(lo_out);
    Py_XDECREF(ids_out);
    Py_XDECREF(unshared_out);
    Py_XDECREF(callers_out);
    free(pair_lo);
    free(pairs);
    free(tail_lo);
    free(tails);
    free(at);
    free(stack);
    free(total);
    free(color);
    return result;
}
