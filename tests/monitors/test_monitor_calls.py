"""Call arity, keyword names and `case` patterns against the real Python language servers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from codemask.monitors import Monitor, for_workspace, language_spec
from codemask.monitors.calls import CallSyntax, call_shape
from tests.monitors.conftest import Vocab, require_server, smollm2_names

SYNTAX = CallSyntax.from_trigger(language_spec("python").triggers["call"])


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return smollm2_names("python")


def by_kind(monitors: list[Monitor], kind: str) -> Monitor:
    return next(m for m in monitors if type(m).__name__ == kind)


def allowed(monitor: Monitor, text: str, vocab: Vocab, *tokens: str) -> dict[str, bool]:
    """Whether each token is allowed after ``text`` by the monitor's masks (all of them)."""
    ids, masks = vocab
    found = monitor.masks(text, masks)
    return {t: bool(np.all([m[ids[t.encode()]] for m in found])) if found else True for t in tokens}


@pytest.mark.parametrize("server", ["pyrefly", "jedi", "ty"])
def test_each_server_gives_the_call_shape(project: Path, main_prefix: str, server: str) -> None:
    require_server("python", server)
    file = for_workspace(project, "main.py", server=server, timeout_s=10.0)[0].file
    shape = call_shape(file.request("textDocument/signatureHelp", main_prefix + "inv.restock_shelf("), SYNTAX)
    assert shape is not None and shape.parameters is not None
    assert shape.max_positional == 2  # name, count (self is bound; urgent is keyword-only)
    assert [p.name for p in shape.parameters if p.required] == ["name"]
    assert shape.keywords == ("count", "name", "urgent")
    quote = call_shape(file.request("textDocument/signatureHelp", main_prefix + "quote_price("), SYNTAX)
    assert quote is not None and quote.max_positional == 3
    assert quote.parameters is not None and [p.name for p in quote.parameters if p.required] == ["base", "quantity"]


def test_arity_masks_commas_and_closing_parentheses(monitors: list[Monitor], main_prefix: str,
                                                    vocab: Vocab) -> None:
    call = by_kind(monitors, "CallArgumentMonitor")
    q = main_prefix + "quote_price("
    assert allowed(call, q, vocab, ")", ",", "1") == {")": False, ",": True, "1": True}  # base, quantity missing
    assert allowed(call, q + "1.0, 2", vocab, ")", ",") == {")": True, ",": True}  # discount_rate may follow
    assert allowed(call, q + "1.0, 2, 0.1", vocab, ")", ",", "5") == {")": True, ",": False, "5": True}
    assert allowed(call, q + "1.0, quantity=2", vocab, ")")[")"]  # given by name
    assert not allowed(call, q + "1.0, discount_rate=2", vocab, ")")[")"]  # quantity still missing
    assert allowed(call, q + 'f(1, 2, 3), "a,b"', vocab, ",")[","]  # nested commas do not count
    assert allowed(call, q + "*xs", vocab, ")", ",") == {")": True, ",": True}  # unpacking: count unknown
    assert allowed(call, q + "1.0, 2, key=lambda a, b", vocab, ",")[","]  # a lambda's commas: count unknown
    assert allowed(call, q + "1.0, lambda a, b: a", vocab, ",")[","]
    assert allowed(call, "def quote_price(a, b, c, d", vocab, ",", ")") == {",": True, ")": True}  # no call
    inner = allowed(call, main_prefix + "quote_price(1.0, 2, 0.1 + inv.total_quantity(", vocab, ")", ",")
    assert inner == {")": True, ",": False}  # the inner call takes no argument


def test_after_the_positional_parameters_only_keywords(monitors: list[Monitor], main_prefix: str,
                                                       vocab: Vocab) -> None:
    call = by_kind(monitors, "CallArgumentMonitor")
    r = main_prefix + 'inv.restock_shelf("tea", 2'
    assert allowed(call, r, vocab, ",")[","]  # urgent= may still come
    after = allowed(call, r + ",", vocab, " x", " ur", " urgent", " count", "\n", " ", ")")
    assert after == {" x": False, " ur": True, " urgent": True, " count": False, "\n": True, " ": True, ")": True}
    assert allowed(call, r + ", urgent=True", vocab, ",", ")") == {",": False, ")": True}
    assert allowed(call, r + ", ur", vocab, "gent", "ge", "l") == {"gent": True, "ge": True, "l": False}


def test_overloads_and_star_args_leave_arity_alone(monitors: list[Monitor], main_prefix: str,
                                                   vocab: Vocab) -> None:
    call = by_kind(monitors, "CallArgumentMonitor")
    assert allowed(call, main_prefix + "print(1, 2, 3", vocab, ",", ")") == {",": True, ")": True}
    assert allowed(call, main_prefix + "max(1, 2, 3", vocab, ",", ")") == {",": True, ")": True}


def test_case_patterns_name_enum_members(project: Path, vocab: Vocab) -> None:
    member = for_workspace(project, "main.py")[0]
    prefix = "from shop.colors import Shade\n\n\ndef f(s: Shade) -> int:\n    match s:\n        case Shade."
    assert allowed(member, prefix, vocab, "TE", "C", "name", "value", "x") == {
        "TE": True, "C": True, "name": False, "value": False, "x": False}
    outside = "from shop.colors import Shade\n\nlabel = Shade."
    assert allowed(member, outside, vocab, "TE", "name", "x") == {"TE": True, "name": True, "x": False}
