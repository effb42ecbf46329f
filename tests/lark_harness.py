"""Differential-testing harness for Lark grammars: Lark as the oracle, plus inputs to test with.

What it offers, for any Lark grammar text (see :class:`LarkCase` for the shared grammars):

- :func:`lark_accepts` — does ``lark`` (1.3.1, LALR + contextual lexer by default) accept a string?
- :class:`SentenceGenerator` — random strings of the grammar's language: a random derivation of
  terminals (bounded depth, biased to terminate), a random string per terminal from its Python
  regex, joined with ignorable separators where needed; only the strings Lark accepts are kept.
- :func:`load_corpus` — realistic hand-written documents per grammar (``tests/data/lark_corpus``).
- :func:`mutants` — small random edits of a string, each labelled by Lark.
- :func:`reference_accepts` — an executable version of the semantics codemask emulates
  (docs/lark-semantics.md, "What codemask emulates"): Lark's own lexers driven by a GLR parser over
  Lark's LALR(1) automaton. ``mode="lalr"`` (normative) equals Lark wherever Lark's LALR parser
  accepts the grammar and extends it to grammars with reduce/reduce conflicts; ``mode="viable"``
  uses exact viable-terminal sets instead (what a general CFG parser computes naturally) and
  shows where that approximation differs from Lark.

Everything is built from Lark's own grammar loader, never from codemask's front-end, so that the
harness stays an independent oracle for the engine's matcher.
"""

from __future__ import annotations

import random
import re
import re._constants as sre
import re._parser as sre_parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from lark import Lark
from lark.common import LexerConf, ParserConf
from lark.exceptions import LarkError, UnexpectedCharacters
from lark.grammar import Rule as LarkRule
from lark.indenter import Indenter
from lark.lexer import BasicLexer, LexerState, PatternStr, TerminalDef
from lark.load_grammar import load_grammar
from lark.parsers.lalr_analysis import LALR_Analyzer
from lark.utils import TextSlice

ROOT = Path(__file__).resolve().parents[1]
SHARED_LARK = ROOT / "tests" / "data" / "grammars" / "lark"
CORPUS_DIR = Path(__file__).resolve().parent / "data" / "lark_corpus"


# --------------------------------------------------------------------------------------------
# Grammar cases
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LarkCase:
    """A Lark grammar and how to run it: start rule, import paths, Python-style indentation.

    ``indenter`` names the newline terminal when the grammar needs Lark's ``Indenter`` post-lexer
    (Python grammars: ``_NEWLINE`` or ``_NL``); it then emits the ``%declare``d ``_INDENT`` and
    ``_DEDENT`` tokens.
    """

    name: str
    text: str
    start: str = "start"
    import_paths: tuple[str, ...] = ()
    indenter: str | None = None

    @classmethod
    def shared(cls, relpath: str, start: str = "start", indenter: str | None = None) -> LarkCase:
        """A grammar from ``tests/data/grammars/lark``; imports resolve next to it first."""
        path = (SHARED_LARK / relpath).resolve()
        return cls(relpath.removesuffix(".lark"), path.read_text(encoding="utf-8"), start,
                   (str(path.parent),), indenter)


# Every shared grammar that Lark itself can parse with, with the options it needs.
SHARED_CASES: dict[str, tuple[str, str | None]] = {
    "lark-parser/composition_csv.lark": ("start", None),
    "lark-parser/composition_json.lark": ("start", None),
    "lark-parser/grammars_verilog.lark": ("start", None),
    "lark-parser/lark.lark": ("start", None),
    "lark-parser/python.lark": ("file_input", "_NEWLINE"),
    "lark-parser/advanced_python2.lark": ("file_input", "_NEWLINE"),
    "llguidance/lark.lark": ("start", None),
    "outlines/arithmetic.lark": ("start", None),
    "outlines/json.lark": ("start", None),
    "syncode/c.lark": ("start", None),
    "syncode/calc.lark": ("start", None),
    "syncode/go.lark": ("start", None),
    "syncode/invariants.lark": ("start", None),
    "syncode/java.lark": ("start", None),
    "syncode/json.lark": ("start", None),
    "syncode/prover9.lark": ("start", None),
    "syncode/python.lark": ("start", "_NL"),
    "syncode/sql.lark": ("start", None),
    "syncode/tiny.lark": ("start", None),
}


def shared_case(relpath: str) -> LarkCase:
    start, indenter = SHARED_CASES[relpath]
    return LarkCase.shared(relpath, start, indenter)


# --------------------------------------------------------------------------------------------
# Lark as the oracle
# --------------------------------------------------------------------------------------------

def _indenter_for(nl_type: str) -> Indenter:
    class _PythonIndenter(Indenter):
        NL_type = nl_type
        OPEN_PAREN_types = ["LPAR", "LSQB", "LBRACE"]  # noqa: RUF012 (Lark's interface)
        CLOSE_PAREN_types = ["RPAR", "RSQB", "RBRACE"]  # noqa: RUF012
        INDENT_type = "_INDENT"
        DEDENT_type = "_DEDENT"
        tab_len = 8

    return _PythonIndenter()


@lru_cache(maxsize=64)
def lark_parser(case: LarkCase, parser: str = "lalr") -> Lark:
    """Lark's parser for ``case`` (cached: building the LALR tables of a big grammar takes time)."""
    postlex = _indenter_for(case.indenter) if case.indenter else None
    return Lark(case.text, parser=parser, start=case.start, import_paths=list(case.import_paths),
                postlex=postlex, source_path=f"<{case.name}>")


def lark_accepts(case: LarkCase, sample: str, parser: str = "lalr") -> bool:
    """Whether Lark accepts ``sample`` in full (``Lark.parse`` returns instead of raising)."""
    try:
        lark_parser(case, parser).parse(sample)
    except LarkError:
        return False
    except IndexError:
        # Lark's Indenter takes the indentation after the last "\n" of a newline token and crashes
        # on one without any (syncode's python.lark lets a LONG_STRING "comment" be a _NL token).
        if case.indenter:
            return False
        raise
    return True


@dataclass
class CompiledLark:
    """A grammar as Lark compiles it: terminals (in Lark's lexer order), BNF rules, ignored names."""

    terminals: dict[str, TerminalDef]
    rules: list[LarkRule]
    ignore: tuple[str, ...]
    start: str
    declared: frozenset[str] = field(default_factory=frozenset)
    rules_by_origin: dict[str, list[LarkRule]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rule in self.rules:
            self.rules_by_origin.setdefault(str(rule.origin.name), []).append(rule)


@lru_cache(maxsize=64)
def compile_lark(case: LarkCase) -> CompiledLark:
    grammar, _files = load_grammar(case.text, f"<{case.name}>", list(case.import_paths), False)
    keep = {case.indenter} if case.indenter else set()
    terminals, rules, ignore = grammar.compile([case.start], keep)
    ordered = sorted(terminals, key=lambda t: (-t.priority, -t.pattern.max_width, -len(t.pattern.value), t.name))
    used = {str(s.name) for r in rules for s in r.expansion if s.is_term}
    return CompiledLark({t.name: t for t in ordered}, list(rules), tuple(dict.fromkeys(ignore)), case.start,
                        frozenset(used - {t.name for t in terminals}))


# --------------------------------------------------------------------------------------------
# Random strings from a Python regex (over Python's own regex parse tree)
# --------------------------------------------------------------------------------------------

_POOL = [chr(c) for c in range(32, 127)] + ["\t", "\n", "é", "ß", "λ", "中", "😀"]
_CATEGORY_RE = {
    sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S", sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W",
}


class RegexSampler:
    """Short random strings that a Python regex matches in full (checked with ``re.fullmatch``).

    It walks the tree of ``re._parser`` (the parser ``re`` itself uses), choosing branches and
    repeat counts at random with a bias to short strings; lookarounds and anchors emit nothing and
    are enforced by the final ``fullmatch`` check, with retries.
    """

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.regex = re.compile(pattern, flags)
        self.tree = sre_parse.parse(pattern, flags)
        self.flags = self.tree.state.flags

    def sample(self, rng: random.Random, tries: int = 40) -> str | None:
        for _ in range(tries):
            groups: dict[int, str] = {}
            text = self._emit(self.tree.data, rng, self.flags, groups)
            if text is not None and self.regex.fullmatch(text):
                return text
        return None

    def _emit(self, items: list, rng: random.Random, flags: int, groups: dict[int, str]) -> str | None:  # type: ignore[type-arg]
        out: list[str] = []
        for op, av in items:
            piece = self._emit_one(op, av, rng, flags, groups)
            if piece is None:
                return None
            out.append(piece)
        return "".join(out)

    def _emit_one(self, op, av, rng: random.Random, flags: int, groups: dict[int, str]) -> str | None:  # type: ignore[no-untyped-def]
        if op is sre.LITERAL:
            return self._case(chr(av), rng, flags)
        if op is sre.NOT_LITERAL:
            return self._pick(lambda ch: ch != chr(av), rng, flags)
        if op is sre.ANY:
            return self._pick(lambda ch: flags & re.DOTALL or ch != "\n", rng, flags)
        if op is sre.IN:
            return self._emit_class(av, rng, flags)
        if op is sre.BRANCH:
            return self._emit(rng.choice(av[1]), rng, flags, groups)
        if op is sre.SUBPATTERN:
            group, add, remove, sub = av
            text = self._emit(sub.data if hasattr(sub, "data") else sub, rng, (flags | add) & ~remove, groups)
            if group is not None and text is not None:
                groups[group] = text
            return text
        if op is sre.ATOMIC_GROUP:
            return self._emit(av.data if hasattr(av, "data") else av, rng, flags, groups)
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT):
            low, high, sub = av
            count = low
            while (high is sre.MAXREPEAT or count < high) and count < low + 6 and rng.random() < 0.5:
                count += 1
            parts = [self._emit(sub.data if hasattr(sub, "data") else sub, rng, flags, groups) for _ in range(count)]
            return None if any(p is None for p in parts) else "".join(p for p in parts if p is not None)
        if op is sre.GROUPREF:
            return groups.get(av)
        if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            return ""
        if op is sre.GROUPREF_EXISTS:
            group, yes, no = av
            branch = yes if group in groups else no
            return "" if branch is None else self._emit(branch.data, rng, flags, groups)
        raise NotImplementedError(f"regex operator {op}")

    def _emit_class(self, items: list, rng: random.Random, flags: int) -> str | None:  # type: ignore[type-arg]
        negated = bool(items) and items[0][0] is sre.NEGATE
        members = items[1:] if negated else items

        def contains(ch: str) -> bool:
            variants = {ch, ch.lower(), ch.upper()} if flags & re.IGNORECASE else {ch}
            return any(self._in_item(op, av, v, flags) for op, av in members for v in variants)

        if negated:
            return self._pick(lambda ch: not contains(ch), rng, flags)
        op, av = rng.choice(members)
        if op is sre.LITERAL:
            return self._case(chr(av), rng, flags)
        if op is sre.RANGE:
            low, high = av
            if high - low > 200 and rng.random() < 0.8:
                ascii_members = [c for c in _POOL if low <= ord(c) <= high]
                if ascii_members:
                    return self._case(rng.choice(ascii_members), rng, flags)
            return self._case(chr(rng.randint(low, high)), rng, flags)
        return self._pick(lambda ch: self._in_item(op, av, ch, flags), rng, flags)

    @staticmethod
    def _in_item(op, av, ch: str, flags: int) -> bool:  # type: ignore[no-untyped-def]
        if op is sre.LITERAL:
            return ord(ch) == av
        if op is sre.RANGE:
            return av[0] <= ord(ch) <= av[1]
        if op is sre.CATEGORY:
            return re.fullmatch(_CATEGORY_RE[av], ch, flags & re.ASCII) is not None
        raise NotImplementedError(f"character-class item {op}")

    @staticmethod
    def _pick(accept, rng: random.Random, flags: int) -> str | None:  # type: ignore[no-untyped-def]
        pool = [ch for ch in _POOL if accept(ch)]
        if not pool:
            return None
        # prefer plain printable ASCII: most grammars are about it
        plain = [ch for ch in pool if " " < ch < "\x7f"]
        return rng.choice(plain if plain and rng.random() < 0.9 else pool)

    @staticmethod
    def _case(ch: str, rng: random.Random, flags: int) -> str:
        if flags & re.IGNORECASE and rng.random() < 0.3:
            return ch.swapcase()
        return ch


# --------------------------------------------------------------------------------------------
# Random sentences
# --------------------------------------------------------------------------------------------

INF = float("inf")


@dataclass
class GeneratorStats:
    attempts: int = 0
    accepted: int = 0

    @property
    def yield_(self) -> float:
        return self.accepted / self.attempts if self.attempts else 0.0


class SentenceGenerator:
    """Random strings that Lark accepts, for a grammar (see the module docstring).

    A random derivation from the start rule gives a sequence of terminals: below ``max_depth``
    each non-terminal picks an expansion at random, beyond it (or past ``max_tokens``) the
    expansion with the fewest terminals. Each terminal becomes a random string of its pattern.
    Tokens are joined with nothing, with an ignorable separator between word characters, or with
    a separator everywhere (tried in random order, the first variant Lark accepts is kept): the
    lexer must cut the text back into a sentence, and only Lark can say whether it does.
    """

    def __init__(self, case: LarkCase, seed: int = 0, max_depth: int = 12, max_tokens: int = 60) -> None:
        self.case = case
        self.grammar = compile_lark(case)
        self.rng = random.Random(seed)
        self.max_depth = max_depth
        self.max_tokens = max_tokens
        self.stats = GeneratorStats()
        self._samplers: dict[str, RegexSampler] = {}
        self._layout = {case.indenter, "_INDENT", "_DEDENT"} if case.indenter else set()
        self._cost = self._min_costs()
        self.separator = self._separator()

    def sentences(self, count: int, max_attempts: int | None = None) -> list[str]:
        """Up to ``count`` distinct accepted strings, from at most ``max_attempts`` derivations."""
        found: dict[str, None] = {}
        budget = max_attempts if max_attempts is not None else count * 4
        while len(found) < count and budget > 0:
            budget -= 1
            self.stats.attempts += 1
            sentence = self.sentence()
            if sentence is not None:
                self.stats.accepted += 1
                found[sentence] = None
        return list(found)

    def sentence(self) -> str | None:
        """One random string that Lark accepts, or None when this attempt produced none."""
        names = self.terminal_sequence()
        tokens = self.render(names)
        if tokens is None:
            return None
        joinings = list(dict.fromkeys(self._joinings(tokens)))
        self.rng.shuffle(joinings)
        for candidate in joinings:
            if lark_accepts(self.case, candidate):
                return candidate
        return None

    def terminal_sequence(self) -> list[str]:
        """The terminals of one random derivation of the start rule (layout tokens included)."""
        out: list[str] = []
        stack: list[tuple[str, int]] = [(self.grammar.start, 0)]
        by_origin = self.grammar.rules_by_origin
        while stack:
            symbol, depth = stack.pop()
            if symbol not in by_origin:
                out.append(symbol)
                continue
            options = [r for r in by_origin[symbol] if self._rule_cost(r) < INF]
            if not options:
                raise ValueError(f"rule {symbol} derives no string the generator can produce")
            if depth >= self.max_depth or len(out) >= self.max_tokens:
                best = min(self._rule_cost(r) for r in options)
                options = [r for r in options if self._rule_cost(r) == best]
            rule = self.rng.choice(options)
            stack.extend((str(s.name), depth + 1) for s in reversed(rule.expansion))
        return out

    def render(self, names: list[str]) -> list[str] | None:
        """A random string per terminal; layout tokens (newline, indent, dedent) render together."""
        tokens: list[str] = []
        level = 0
        for i, name in enumerate(names):
            if name in self._layout:
                if name == self.case.indenter:
                    following = names[i + 1:]
                    for nxt in following:
                        if nxt == "_INDENT":
                            level += 1
                        elif nxt == "_DEDENT":
                            level -= 1
                        else:
                            break
                    tokens.append("\n" + "    " * max(level, 0))
                else:
                    tokens.append("")
                continue
            text = self.terminal_text(name)
            if text is None:
                return None
            tokens.append(text)
        return tokens

    def terminal_text(self, name: str) -> str | None:
        pattern = self.grammar.terminals[name].pattern
        if isinstance(pattern, PatternStr) and not pattern.flags:
            return pattern.value
        sampler = self._samplers.get(name)
        if sampler is None:
            sampler = self._samplers[name] = RegexSampler(pattern.to_regexp())
        return sampler.sample(self.rng)

    def _joinings(self, tokens: list[str]) -> Iterator[str]:
        yield "".join(tokens)
        sep = self.separator
        if sep is None:
            return
        word = re.compile(r"\w")
        out = []
        for i, tok in enumerate(tokens):
            if i and tok and out and out[-1] and word.match(out[-1][-1]) and word.match(tok[0]):
                out.append(sep)
            out.append(tok)
        yield "".join(out)
        spaced = [tok for tok in tokens if tok]
        yield sep.join(spaced)

    def _separator(self) -> str | None:
        for name in self.grammar.ignore:
            regex = re.compile(self.grammar.terminals[name].pattern.to_regexp())
            for candidate in (" ", "\t", "\n"):
                if regex.fullmatch(candidate):
                    return candidate
        return None

    def _min_costs(self) -> dict[str, float]:
        """Fewest terminals each non-terminal derives (inf: none, e.g. needs an unknown %declare)."""
        cost: dict[str, float] = dict.fromkeys(self.grammar.rules_by_origin, INF)
        changed = True
        while changed:
            changed = False
            for origin, rules in self.grammar.rules_by_origin.items():
                best = min(self._rule_cost(r, cost) for r in rules)
                if best < cost[origin]:
                    cost[origin] = best
                    changed = True
        return cost

    def _rule_cost(self, rule: LarkRule, cost: dict[str, float] | None = None) -> float:
        table = self._cost if cost is None else cost
        total = 0.0
        for sym in rule.expansion:
            name = str(sym.name)
            if sym.is_term:
                total += 0 if name in self._layout else (INF if name in self.grammar.declared else 1)
            else:
                total += table.get(name, INF)
        return total


# --------------------------------------------------------------------------------------------
# Corpora and mutants
# --------------------------------------------------------------------------------------------

LARK_SYNTAX_CASES = ("lark-parser/lark", "llguidance/lark")


def load_corpus(name: str) -> list[str]:
    """Real documents for grammar ``name`` (e.g. ``"syncode/sql"``), in a stable order.

    Hand-written snippets live in ``tests/data/lark_corpus/<name>/``; the grammars of Lark's own
    syntax get every shared ``.lark`` file instead.
    """
    if name in LARK_SYNTAX_CASES:
        paths = sorted(SHARED_LARK.glob("*/*.lark"))
    else:
        paths = sorted(p for p in (CORPUS_DIR / name).iterdir() if p.is_file())
    return [p.read_text(encoding="utf-8") for p in paths]


_EDIT_CHARS = " \n\t(){}[]<>;:,.\"'=+-*/_#0123456789abcdefxyzABCXYZ\\é"


def mutate(sample: str, rng: random.Random, edits: int = 1) -> str:
    """``sample`` with ``edits`` random deletions, insertions, replacements or swaps."""
    text = sample
    for _ in range(edits):
        pos = rng.randrange(len(text) + 1)
        op = rng.choice(("delete", "insert", "replace", "swap", "truncate"))
        pool = _EDIT_CHARS + (text if text else "")
        if op == "delete" and text:
            end = min(len(text), pos + rng.choice((1, 1, 1, 2, 5)))
            text = text[:pos] + text[end:]
        elif op == "replace" and pos < len(text):
            text = text[:pos] + rng.choice(pool) + text[pos + 1:]
        elif op == "swap" and pos + 1 < len(text):
            text = text[:pos] + text[pos + 1] + text[pos] + text[pos + 2:]
        elif op == "truncate" and text:
            text = text[:pos]
        else:
            text = text[:pos] + rng.choice(pool) + text[pos:]
    return text


def mutants(case: LarkCase, sample: str, count: int, seed: int = 0) -> list[tuple[str, bool]]:
    """``count`` distinct mutants of ``sample``, each with Lark's verdict."""
    rng = random.Random(seed)
    seen: dict[str, bool] = {}
    for _ in range(count * 4):
        if len(seen) >= count:
            break
        variant = mutate(sample, rng, rng.choice((1, 1, 2, 3)))
        if variant != sample and variant not in seen:
            seen[variant] = lark_accepts(case, variant)
    return list(seen.items())


# --------------------------------------------------------------------------------------------
# Reference semantics: Lark's lexers under a GLR parser over Lark's LALR(1) automaton
# --------------------------------------------------------------------------------------------

END = "$END"


class LalrAutomaton:
    """Lark's LALR(1) automaton for a grammar, with Lark's conflict resolution.

    With ``resolve`` (Lark's behaviour), shift/reduce conflicts resolve as shift and
    reduce/reduce conflicts by rule priority, as in
    ``lark.parsers.lalr_analysis.compute_lalr1_states``; the reduce/reduce conflicts Lark refuses
    are kept (``conflicts``) and explored in parallel by :class:`GlrRecognizer`. Without it every
    conflicting action is kept, and the GLR parser recognises exactly the context-free language.
    """

    def __init__(self, grammar: CompiledLark, resolve: bool = True) -> None:
        analyzer = LALR_Analyzer(ParserConf(grammar.rules, {}, [grammar.start]))
        analyzer.compute_lr0_states()
        analyzer.compute_reads_relations()
        analyzer.compute_includes_lookback()
        analyzer.compute_lookaheads()
        itemsets = list(analyzer.lr0_itemsets)
        index = {itemset: i for i, itemset in enumerate(itemsets)}
        self.shift: list[dict[str, int]] = []
        self.reduce: list[dict[str, list[LarkRule]]] = []
        self.conflicts: list[tuple[int, str, list[LarkRule]]] = []
        self.shift_reduce: list[tuple[int, str, list[LarkRule]]] = []
        for i, itemset in enumerate(itemsets):
            shifts = {str(sym.name): index[nxt] for sym, nxt in itemset.transitions.items()}
            reduces: dict[str, list[LarkRule]] = {}
            for la, rules in itemset.lookaheads.items():
                name = str(la.name)
                if name in shifts:
                    self.shift_reduce.append((i, name, list(rules)))
                    if resolve:
                        continue  # shift/reduce: Lark shifts
                if not resolve:
                    reduces[name] = list(rules)
                    continue
                ranked = sorted(rules, key=lambda r: -(r.options.priority or 0))
                top = ranked[0].options.priority or 0
                kept = [r for r in ranked if (r.options.priority or 0) == top]
                if len(kept) > 1:
                    self.conflicts.append((i, name, kept))
                reduces[name] = kept
            self.shift.append(shifts)
            self.reduce.append(reduces)
        self.start_state = index[analyzer.lr0_start_states[grammar.start]]
        self.end_state = self.shift[self.start_state][grammar.start]
        self._nonterminals = set(grammar.rules_by_origin)

    def keys(self, state: int) -> set[str]:
        """The terminals with an action in ``state``: the contextual lexer's candidates there."""
        return {name for name in self.shift[state] if name not in self._nonterminals} | set(self.reduce[state])


Stack = tuple[int, ...]


class GlrRecognizer:
    """A set of LR stacks over a :class:`LalrAutomaton`, advanced one terminal at a time."""

    def __init__(self, automaton: LalrAutomaton) -> None:
        self.automaton = automaton

    def initial(self) -> frozenset[Stack]:
        return frozenset({(self.automaton.start_state,)})

    def feed(self, stacks: frozenset[Stack], terminal: str) -> frozenset[Stack]:
        """The stacks after all reductions ``terminal`` triggers and its shift (empty: rejected)."""
        auto = self.automaton
        shifted: set[Stack] = set()
        seen: set[Stack] = set()
        work = list(stacks)
        while work:
            stack = work.pop()
            if stack in seen or len(seen) > 100_000:
                continue
            seen.add(stack)
            top = stack[-1]
            nxt = auto.shift[top].get(terminal)
            if nxt is not None and terminal != END:
                shifted.add((*stack, nxt))
            if terminal == END and top == auto.end_state and len(stack) == 2:
                shifted.add(stack)
            for rule in auto.reduce[top].get(terminal, ()):
                base = stack[: len(stack) - len(rule.expansion)]
                goto = auto.shift[base[-1]].get(str(rule.origin.name))
                if goto is not None:
                    work.append((*base, goto))
        return frozenset(shifted)

    def candidates(self, stacks: frozenset[Stack], mode: str) -> set[str]:
        """Lexer candidates: action keys of the tops (``"lalr"``) or exactly viable terminals."""
        keys = set().union(*(self.automaton.keys(s[-1]) for s in stacks)) - {END}
        if mode == "lalr":
            return keys
        return {t for t in keys if self.feed(stacks, t)}  # "viable" and "cfg"


@dataclass
class _IndentState:
    levels: tuple[int, ...] = (0,)
    parens: int = 0


def reference_accepts(case: LarkCase, sample: str, mode: str = "lalr") -> bool:
    """Whether ``sample`` is in the language docs/lark-semantics.md defines.

    ``mode``: ``"lalr"`` — the normative semantics (lexer candidates are the action keys of
    Lark's LALR states); ``"viable"`` — candidates are the terminals that can really be shifted
    next (same automaton, so Lark's shift preference is kept); ``"cfg"`` — candidates are exactly
    viable in the unrestricted context-free grammar, no conflict resolution at all (what a general
    CFG parser with a contextual lexer computes without help from Lark's automaton).
    """
    grammar = compile_lark(case)
    glr = _glr(case, mode != "cfg")
    lexers: dict[frozenset[str], BasicLexer] = {}
    state = LexerState(TextSlice.cast_from(sample))
    stacks = glr.initial()
    indent = _IndentState()
    always = {case.indenter} if case.indenter else set()
    while True:
        cands = frozenset(glr.candidates(stacks, mode) | set(grammar.ignore) | always)
        lexer = lexers.get(cands)
        if lexer is None:
            terms = [grammar.terminals[n] for n in cands if n in grammar.terminals]
            conf = LexerConf(terms, re, grammar.ignore, skip_validation=True)
            lexer = lexers[cands] = BasicLexer(conf)
        try:
            token = lexer.next_token(state)
        except EOFError:
            break
        except UnexpectedCharacters:
            return False
        for kind in _post_lex(case, token.type, str(token), indent):
            stacks = glr.feed(stacks, kind)
            if not stacks:
                return False
    for _ in indent.levels[1:]:
        stacks = glr.feed(stacks, "_DEDENT")
    return bool(stacks) and bool(glr.feed(stacks, END))


def _post_lex(case: LarkCase, kind: str, text: str, indent: _IndentState) -> list[str]:
    """Lark's ``Indenter`` as a function: the token types a raw token turns into."""
    if not case.indenter:
        return [kind]
    if kind in ("LPAR", "LSQB", "LBRACE"):
        indent.parens += 1
    elif kind in ("RPAR", "RSQB", "RBRACE"):
        indent.parens = max(indent.parens - 1, 0)
    if kind != case.indenter:
        return [kind]
    if indent.parens:
        return []
    if "\n" not in text:  # Lark's Indenter crashes here (see lark_accepts): a rejection
        return ["<no newline>"]
    tail = text.rsplit("\n", 1)[1]
    width = tail.count(" ") + tail.count("\t") * 8
    out = [kind]
    if width > indent.levels[-1]:
        indent.levels = (*indent.levels, width)
        return [*out, "_INDENT"]
    while width < indent.levels[-1]:
        indent.levels = indent.levels[:-1]
        out.append("_DEDENT")
    if width != indent.levels[-1]:
        return [*out, "<bad dedent>"]
    return out


@lru_cache(maxsize=64)
def _glr(case: LarkCase, resolve: bool = True) -> GlrRecognizer:
    return GlrRecognizer(LalrAutomaton(compile_lark(case), resolve))
