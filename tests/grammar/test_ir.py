"""The IR's node classes: frozen dataclasses whose constructors set their slots directly."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from codemask.errors import GrammarError
from codemask.grammar import ir

NODE_CLASSES = [ir.Literal, ir.CharClass, ir.ByteClass, ir.RuleRef, ir.TerminalRef, ir.Sequence, ir.Choice,
                ir.Repeat, ir.Rule, ir.Terminal]


@pytest.mark.parametrize("cls", NODE_CLASSES, ids=lambda cls: cls.__name__)
def test_constructors_take_the_dataclass_parameters(cls: type) -> None:
    expected = [(f.name, f.default) for f in dataclasses.fields(cls) if f.init]
    got = [(p.name, p.default if p.default is not inspect.Parameter.empty else dataclasses.MISSING)
           for p in inspect.signature(cls).parameters.values()]
    assert got == expected


def test_nodes_hold_what_they_are_given_and_stay_frozen() -> None:
    item = ir.Literal(b"ab")
    rule = ir.Rule("r", item, shared=True)
    assert (rule.name, rule.body, rule.lookahead, rule.shared, rule.standalone) == ("r", item, None, True, False)
    assert ir.Repeat(item, 2) == ir.Repeat(item=item, min=2, max=None)
    sequence = ir.Sequence((item, ir.RuleRef("r")))
    assert sequence == ir.Sequence((ir.Literal(b"ab"), ir.RuleRef("r")))
    assert hash(sequence) == hash(ir.Sequence((ir.Literal(b"ab"), ir.RuleRef("r"))))
    assert dataclasses.replace(rule, shared=False) == ir.Rule("r", item)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.name = "s"  # type: ignore[misc]
    with pytest.raises(TypeError):
        ir.Literal()  # type: ignore[call-arg]


def test_a_repetition_count_past_machine_integers_is_still_refused() -> None:
    with pytest.raises(GrammarError, match="too large"):
        ir.Repeat(ir.Literal(b"a"), 0, ir.MAX_REPEAT + 1)
