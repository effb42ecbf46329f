"""Boolean combinations of regular languages, turned back into grammar rules.

A grammar can take the union of two regular expressions but not their intersection or
difference, and JSON Schema needs both: a key that matches no ``patternProperties`` pattern (and
is no named property) is an *additional* key; a key matching two patterns must satisfy both
schemas; a string under two ``pattern``s, or a ``pattern`` and a length, is in their intersection.

So each operand is compiled to a byte DFA with the engine's own automaton builder, the product is
explored breadth-first keeping only the pairs reachable from the start (the bytes no operand tells
apart move as one), every product state that cannot reach acceptance is dropped, and each
remaining state becomes a rule (byte classes to the next state's rule). Exactness is over the raw
UTF-8 spelling; callers add the escaped spellings.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from codemask.engine.automaton import BYTE_ALPHABET, DFA, compile_expr
from codemask.grammar.ir import EMPTY, NOTHING, ByteClass, Expr, RuleRef, choice, seq

MAX_PRODUCT_STATES = 2000


class TooLarge(Exception):
    """The product automaton would exceed MAX_PRODUCT_STATES."""


def combine(operands: list[Expr], accept: Callable[[tuple[bool, ...]], bool], prefix: str,
            rules: dict[str, Expr]) -> Expr:
    """The strings whose membership in each operand satisfies ``accept``, as rules added to ``rules``.

    Operands must be regular (no rule references). Returns the start expression (``NOTHING`` when
    the language is empty). Raises :class:`TooLarge` beyond MAX_PRODUCT_STATES states.
    """
    dfas = [compile_expr(op, {}, BYTE_ALPHABET) for op in operands]
    classes = _byte_classes(dfas)
    columns = [cls[0] for cls in classes]
    tables = [d.trans[:, columns].tolist() for d in dfas]  # per operand: its targets by state, then class
    unmoved = [-1] * len(classes)
    nowhere = (-1,) * len(dfas)
    start = tuple(d.start if d.trans.shape[0] else -1 for d in dfas)
    index = {start: 0}
    order = [start]
    edges: list[dict[int, list[int]]] = []
    for state in order:
        rows = [table[s] if s >= 0 else unmoved for table, s in zip(tables, state, strict=True)]
        groups: dict[tuple[int, ...], list[int]] = {}  # (in the order of their first bytes)
        for cls, targets in zip(classes, zip(*rows, strict=True), strict=True):
            if targets != nowhere:
                groups.setdefault(targets, []).extend(cls)
        by_target: dict[int, list[int]] = {}
        for nxt, byte_list in groups.items():
            if nxt not in index:
                if len(order) >= MAX_PRODUCT_STATES:
                    raise TooLarge
                index[nxt] = len(order)
                order.append(nxt)
            by_target[index[nxt]] = byte_list
        edges.append(by_target)
    accepting = [accept(tuple(s >= 0 and bool(d.accepting[s]) for d, s in zip(dfas, state, strict=True)))
                 for state in order]
    useful = _co_reachable(edges, accepting)
    if 0 not in useful:
        return NOTHING
    for i in sorted(useful):
        alternatives = [EMPTY] if accepting[i] else []
        for target, byte_list in sorted(edges[i].items()):
            if target in useful:
                alternatives.append(seq(ByteClass(_ranges(byte_list)), RuleRef(f"{prefix}{target}")))
        rules[f"{prefix}{i}"] = choice(*alternatives)
    return RuleRef(f"{prefix}0")


def _byte_classes(dfas: list[DFA]) -> list[list[int]]:
    """The bytes no operand tells apart (equal columns in every operand's table), each class's
    bytes ascending, the classes in the order of their first bytes: the product moves class by
    class (a few dozen) instead of byte by byte."""
    columns = [np.ascontiguousarray(d.trans.T) for d in dfas]
    classes: dict[tuple[bytes, ...], list[int]] = {}
    for byte in range(BYTE_ALPHABET):
        classes.setdefault(tuple(column[byte].tobytes() for column in columns), []).append(byte)
    return list(classes.values())


def _co_reachable(edges: list[dict[int, list[int]]], accepting: list[bool]) -> set[int]:
    """The states from which an accepting state can be reached."""
    backwards: dict[int, list[int]] = {}
    for source, targets in enumerate(edges):
        for target in targets:
            backwards.setdefault(target, []).append(source)
    found = {i for i, ok in enumerate(accepting) if ok}
    stack = list(found)
    while stack:
        for source in backwards.get(stack.pop(), []):
            if source not in found:
                found.add(source)
                stack.append(source)
    return found


def _ranges(values: list[int]) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for v in sorted(values):
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return tuple(out)
