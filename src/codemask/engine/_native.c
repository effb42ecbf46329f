/* The engine's hot loops in C: the mask caches' trie walks, and the parser's closures.
 *
 * `walk` consumes trie nodes' bytes from parser states through the memoised transition table
 * (`ParserCore.table`) depth first, exactly as `trie_walk._walk_scalar` does in Python, and
 * reports what it finds: tokens whose bytes are all consumed with the parse alive (ok), ranges of
 * tokens whose prefix reached the frame's bottom (exits, with the depth of that prefix), and the
 * (node, state) pairs whose transition the table does not know yet (pending). Python computes the
 * pending transitions (they intern new parser states) and calls again with the pending pairs;
 * the findings of all calls together are the walk's.
 *
 * `LexerStepper` computes the lexer's transitions (`LexerCore._compute`), and walks through the
 * lexer's states computing the transitions it meets on the way: `walk`, the trie walk of
 * `lexer_masks.classify_lexer_state` (per token, alive at its end (accepted), refused by a poisoned
 * state (blocked), or the lexeme dead inside it, reported with the end of the last match on the
 * way: exits), and `residuals`, the tails' first lexeme for `lexer_masks.ResidualSets.split`.
 *
 * `Interner` computes the parser's transitions: `ParserCore.closure` and `ParserCore._fill_row` (see
 * below), numbering nodes and states exactly as the Python code does (its own index of them, each
 * new state appended to the ParserCore's Python lists), about seven times faster
 * (`benchmarks/parser_rows.py`).
 *
 * In lexer mode, `SymbolSteps` is the lexer layer's parser side (`LexParserCore.after`, the fresh
 * lexer states) and `ResidualWalker` the recursion over residual sets and parser states
 * (`LexerMaskComputer._residuals_accepted`); `set_bits_where`, `pack_rows` and `distinct` are
 * the few loops of a mask's and a classification's bookkeeping that numpy did with a call per step.
 *
 * The parts, a file each, share the private header `_native.h`: `_native_walk.c` (`walk`),
 * `_native_closure.c` (`Interner`), `_native_position.c` (`PositionWalker`),
 * `_native_lexer.c` (`LexerStepper`), `_native_lex_parser.c` (`SymbolSteps`), `_native_residuals.c`
 * (`ResidualWalker`), `_native_dfa.c` (`dfa_of_nfa`: a rule's minimal DFA; `stack_tables`), `_native_ir.c`
 * (`dfa_of_expr`, `expr_text`, `expr_digest`: a rule body's automaton from the grammar IR, and
 * `least_fixed_point`, `strongly_connected`, `rule_uses`, `expr_size`, `left_calls`, `largest_repeat_bound`,
 * `expr_names`, `substitute`: the optimiser's analyses and rewrites),
 * `_native_follow.c` (`follow_bytes`, `rule_graph`), `_native_bits.c` (`set_bits_where`, `distinct`,
 * `pack_rows`) and `_native_common.c` (buffers, hash maps, argument checks); this file holds the
 * module's method table.
 *
 * Built as an optional extension (setup.py): without a C compiler the numpy walk and the Python
 * parser are used instead, and the tests compare the two. Every index read from the arguments is
 * bounds-checked, so a bad argument raises instead of reading out of bounds.
 */
#include "_native.h"

#define NATIVE_VERSION 33

static PyMethodDef methods[] = {
    {"walk", cm_walk, METH_VARARGS,
     "walk(table, alphabet, flags, has_stacks, byte, lo, hi, token, child_lo, child_hi, depth, nodes, states, "
     "owners) -> (ok_owner, ok_token, exit_owner, exit_lo, exit_hi, exit_depth, pending_node, pending_state, "
     "pending_owner), each the bytes of an int32 array"},
    {"follow_bytes", cm_follow_bytes, METH_VARARGS,
     "follow_bytes(trans, accepting, call_lo, callee, ret, rule_start, state_rule, rules, symbols) -> bytes: per rule, "
     "the 256 bytes (0/1) that may follow it (symbols: per state its bytes as 4 uint64 words, or None)"},
    {"rule_graph", cm_rule_graph, METH_VARARGS,
     "rule_graph(owner, callee, tail, sizes, limit) -> (callee_lo, callees, unshared, with_callers): the rules' call "
     "graph, each the bytes of an array"},
    {"set_ir", cm_set_ir, METH_VARARGS, "set_ir(types, grammar_error): the IR's eight expression classes and GrammarError"},
    {"dfa_of_expr", cm_dfa_of_expr, METH_VARARGS,
     "dfa_of_expr(expr, rule_index, terminal_index, alphabet, max_nfa_states, max_dfa_states) -> (runs, run_lo, "
     "accepting, calls, first): the minimal DFA of the Thompson NFA of a grammar expression, and its states' symbols"},
    {"expr_text", cm_expr_text, METH_O, "expr_text(expr) -> str: grammar.ir.to_text of a grammar expression"},
    {"expr_digest", cm_expr_digest, METH_VARARGS,
     "expr_digest(expr, rule_index) -> bytes: a 128-bit digest of an expression, rule references as indices"},
    {"least_fixed_point", cm_least_fixed_point, METH_VARARGS,
     "least_fixed_point(bodies, rule_index, nullable) -> bytes: per rule, whether it is productive (or nullable)"},
    {"stack_tables", cm_stack_tables, METH_VARARGS,
     "stack_tables(tables, width, out) -> bytes: rule automata (dense or runs) laid end to end, targets offset; "
     "per state, scanning"},
    {"strongly_connected", cm_strongly_connected, METH_O,
     "strongly_connected(edges) -> list of lists: Tarjan's components of a graph given as lists of node numbers"},
    {"rule_uses", cm_rule_uses, METH_VARARGS, "rule_uses(expr, uses): add the copies of each rule reference to uses"},
    {"expr_size", cm_expr_size, METH_VARARGS, "expr_size(expr, inlined) -> (weight, depth, kind): optimize.expr_size"},
    {"left_calls", cm_left_calls, METH_VARARGS, "left_calls(expr, nullable) -> set: optimize.left_calls"},
    {"largest_repeat_bound", cm_largest_repeat_bound, METH_O,
     "largest_repeat_bound(expr) -> int: the largest bound of a repetition in expr (0 if none)"},
    {"expr_names", cm_expr_names, METH_O, "expr_names(expr) -> (frozenset, frozenset): the rules and terminals named"},
    {"ir_seq", cm_ir_seq, METH_O, "ir_seq(items) -> Expr: grammar.ir.seq of a tuple of expressions"},
    {"ir_choice", cm_ir_choice, METH_VARARGS, "ir_choice(alternatives, small) -> Expr: grammar.ir.choice of a tuple"},
    {"substitute", cm_substitute, METH_VARARGS,
     "substitute(expr, replacements, seq, choice, repeat, nothing) -> Expr: optimize._substitute"},
    {"pack_rows", cm_pack_rows, METH_VARARGS,
     "pack_rows(words, order, lo, hi): words[t >> 5] |= 1 << (t & 31) for t = order[row], every row in lo[i]:hi[i]"},
    {"distinct", cm_distinct, METH_VARARGS,
     "distinct(slots, numbers) -> (keys, chosen, group): np.unique of int64 numbers with an index and the inverse, "
     "through the int32 scratch table slots (int64, int32 and int64 bytes)"},
    {"set_bits_where", cm_set_bits_where, METH_VARARGS,
     "set_bits_where(words, tokens, offsets, ok, group): words[t >> 5] |= 1 << (t & 31) for each t in "
     "tokens[offsets[r]:offsets[r + 1]] with ok[r] (int32 bytes; group: the packed bits of all tokens, or b'')"},
    {"json_string_chars", cm_json_string_chars, METH_VARARGS,
     "json_string_chars(matrix, width, lengths) -> bytes: per row, the JSON string characters it begins before a "
     "closing quote (int32)"},
    {"string_counts", cm_string_counts, METH_VARARGS,
     "string_counts(trans, accepting, call_lo, callee, ret, lengths, rule_lo, rule_hi, start, free_trans, "
     "free_accepting, free_content, closing) -> bytes or None: per state of the rule, the fewest and the most "
     "characters of a JSON string's content before its end (int32 pairs, -1: not a state between characters)"},
    {"json_char_ends", cm_json_char_ends, METH_VARARGS,
     "json_char_ends(matrix, width, lengths, rows, chars) -> bytes: per row, the byte past its first chars JSON "
     "string characters, or -1 (int32)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native",
                                    "The mask cache's trie walk and the parser's closures in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&cm_InternerType) || PyType_Ready(&cm_PositionWalkerType) || PyType_Ready(&cm_LexerStepperType) || PyType_Ready(&cm_SymbolStepsType) ||
        PyType_Ready(&cm_ResidualWalkerType))
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddIntConstant(m, "VERSION", NATIVE_VERSION) ||
        PyModule_AddObjectRef(m, "Interner", (PyObject *)&cm_InternerType) ||
        PyModule_AddObjectRef(m, "PositionWalker", (PyObject *)&cm_PositionWalkerType) ||
        PyModule_AddObjectRef(m, "LexerStepper", (PyObject *)&cm_LexerStepperType) ||
        PyModule_AddObjectRef(m, "SymbolSteps", (PyObject *)&cm_SymbolStepsType) ||
        PyModule_AddObjectRef(m, "ResidualWalker", (PyObject *)&cm_ResidualWalkerType)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
