"""Large bounded repetitions as counting rules: the same language as the repetition (Python's `re`
is the oracle), a handful of states whatever the bound, and token masks that agree with it."""

from __future__ import annotations

import json
import random
import re

import pytest

from codemask import Grammar, GrammarMatcher
from codemask.engine.automaton import build_rtn
from codemask.engine.recognizer import Recognizer
from codemask.errors import GrammarError
from codemask.grammar.counting import BLOCK, COUNTED_FROM, RADIX
from codemask.grammar.ir import GrammarIR, Repeat, Rule, literal
from codemask.grammar.optimize import optimize
from tests.engine.conftest import compiler, encode

BOUNDS = [(0, COUNTED_FROM + 1), (0, 100), (5, 300), (40, 40), (COUNTED_FROM + 1, None), (100, 1000),
          (0, BLOCK * RADIX**3), (1234, 5000), (BLOCK * RADIX - 1, BLOCK * RADIX + 1)]


def lengths_to_try(low: int, high: int | None) -> list[int]:
    top = (high if high is not None else low + 200) + 3
    edges = {low - 1, low, low + 1, top}
    if high is not None:
        edges |= {high - 1, high, high + 1}
    for k in range(1, 5):  # the counting units' sizes and their neighbours
        unit = BLOCK * RADIX ** (k - 1)
        edges |= {unit - 1, unit, unit + 1, 2 * unit, 3 * unit + 7}
    edges |= set(range(min(top, 70)))
    edges |= set(random.Random(low).sample(range(top), min(top, 80)))
    return sorted(n for n in edges if 0 <= n <= top)


@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_counted_repetition_accepts_exactly_the_lengths_re_accepts(low: int, high: int | None) -> None:
    pattern = f"(ab|c){{{low},{'' if high is None else high}}}d"
    recognizer = Recognizer(Grammar.from_regex(pattern))
    oracle = re.compile(pattern)
    rng = random.Random(high)
    for n in lengths_to_try(low, high):
        text = "".join(rng.choice(["ab", "c"]) for _ in range(n)) + "d"
        assert recognizer.accepts(text) == bool(oracle.fullmatch(text)), (pattern, n)
        assert not recognizer.accepts(text[:-1] + "ad")


def test_bounds_out_of_order_are_reported_not_counted() -> None:
    """An IR built by hand (not through a front-end, which checks the order) still gets a clear error."""
    ir = optimize(GrammarIR(rules={"root": Rule("root", Repeat(literal("a"), 50, 40))}, start="root"))
    with pytest.raises(GrammarError, match="max < min"):
        build_rtn({name: rule.body for name, rule in ir.rules.items()}, ir.start)


def test_states_grow_with_the_logarithm_of_the_bound() -> None:
    sizes = [Recognizer(Grammar.from_regex(f"x{{0,{n}}}"))._core.rtn.num_states for n in (1_000, 10_000, 1_000_000)]
    assert sizes[-1] < 3 * BLOCK + 64 and sizes[-1] - sizes[0] < 64, sizes  # (a thousand times the bound)


@pytest.mark.parametrize(("low", "high"), [(COUNTED_FROM + 1, 3 * BLOCK + 5)])
def test_token_masks_agree_with_the_length_bounds_on_a_real_tokenizer(low: int, high: int) -> None:
    """Strings just inside and just outside the bounds, fed as llama3 tokens through the matcher."""
    compiled = compiler("llama3").compile(Grammar.from_json_schema(
        {"type": "string", "minLength": low, "maxLength": high}))
    rng = random.Random(high)
    words = ["the", " quick", " brown", "fox", " 123", "ü", " jumps", ".", "\\n", "é"]
    for n in sorted({low - 1, low, low + 1, high - 1, high, high + 1, (low + high) // 2}):
        chars: list[str] = []
        while len(chars) < n:
            chars.extend(rng.choice(words))
        value = "".join(chars[:n])
        text = json.dumps(value, ensure_ascii=False)
        matcher = GrammarMatcher(compiled)
        accepted = True
        for token in encode("llama3", text):
            allowed = matcher.is_token_allowed(token)  # the mask
            assert allowed == matcher.accept_token(token), (n, token)  # ... agrees with the parser
            if not allowed:
                accepted = False
                break
        accepted = accepted and matcher.can_terminate()
        assert accepted == (low <= len(value) <= high), (n, text[:40])


def test_rules_without_a_large_repetition_are_found_in_c_and_kept_as_they_are() -> None:
    """`native.largest_repeat_bound` against a walk in Python, over real schemas with and without
    length bounds; the rewrite is the same with the C prefilter as without it."""
    from codemask.engine import native
    from codemask.grammar.counting import count_large_repeats
    from codemask.grammar.ir import Choice, Expr, Sequence
    from tests.data_paths import TEST_DATA

    def largest(expr: Expr) -> int:
        if isinstance(expr, Sequence | Choice):
            parts = expr.items if isinstance(expr, Sequence) else expr.alternatives
            return max((largest(p) for p in parts), default=0)
        if isinstance(expr, Repeat):
            return max(expr.min, expr.max or 0, largest(expr.item))
        return 0

    schemas = [json.loads(p.read_text())["schema"] for p in sorted((TEST_DATA / "jsonschemabench").glob("*.json"))[::5]]
    schemas.append({"type": "object", "properties": {"a": {"type": "string", "maxLength": 200},
                                                    "b": {"type": "array", "items": {}, "minItems": 40}}})
    bounds = []
    for schema in schemas:
        try:
            rules = Grammar.from_json_schema(schema, mode="validate").ir.rules
        except GrammarError:
            continue
        for rule in rules.values():
            bounds.append(native.largest_repeat_bound(rule.body))
            assert bounds[-1] == largest(rule.body)
        with native.using(True):
            fast = count_large_repeats(rules)
        with native.using(False):
            slow = count_large_repeats(rules)
        assert fast == slow
    assert max(bounds) > COUNTED_FROM and min(bounds) == 0
