"""One sequence's repetition state: its tokens, its code's statement units, and the repeats ending both.

Shared by the decoding stage and the Hugging Face processor. Each step it yields a
:class:`Penalties`: which tokens to decay by how many repetitions, and how many repetitions' worth
of end-of-sequence boost to give.

The *critical token* of a structural repeat is the token that began the last copy of the repeated
span of units (the token holding the first byte of its first statement). It is decayed only at the
step where the next copy would begin that token: when the code ends with a complete statement and
the whitespace typed since matches, line for line, the whitespace that preceded the critical token
in the last copy (a newline, then the same indentation). Elsewhere the same token id means
something else (``assert`` inside a string, a name in an expression) and is left alone. This is
what makes the decay independent of how a tokenizer splits ``"\\n    assert"``. A redefinition (a
definition under a name its block already defines) has a critical token too, the one that began it,
decayed at the same kind of step, with its count in the redefinition's generated tokens. So is a
definition whose multi-line docstring nearly copies the one of the definition before it in its block
(:attr:`RPG.copied_docstring`).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

from codemask.repetition.config import RPG
from codemask.repetition.detector import TandemRepeats
from codemask.repetition.likeness import likeness, words
from codemask.repetition.units import StatementUnits, Unit, line_start

_WHITESPACE = b" \t\r\n\f\v"
_LABEL_IDS: dict[str, int] = {}


@dataclass
class Penalties:
    """What to do to one row's next-token distribution: ``decay[token] = count``, the EOS boost count, and
    the transfer to end-of-sequence (:attr:`RPG.eos_transfer`): ``end_from``, the critical token of a
    structural repeat where the code could end, gives ``1 - λ^end_count`` of its probability, where
    ``end_count`` counts what the model wrote itself — the copies of a tandem repeat, the tokens of a
    redefinition (copies in the prompt decay the token but do not end a completion that has not yet
    repeated anything)."""

    decay: dict[int, int] = field(default_factory=dict)
    eos: int = 0
    end_from: int | None = None
    end_count: int = 0

    def __bool__(self) -> bool:
        return bool(self.decay) or self.eos > 0


class RepetitionState:
    """The repetition state of one sequence (prompt + generated tokens)."""

    def __init__(self, rpg: RPG, token_bytes: Sequence[bytes], prompt_ids: Sequence[int] = ()) -> None:
        self.rpg = rpg
        self.token_bytes = token_bytes
        self.token_ids: list[int] = []
        self.ends: list[int] = []  # byte offset where each token ends
        self.units = StatementUnits(rpg.language)
        self.tokens = TandemRepeats(rpg.max_period)
        self.unit_repeats = TandemRepeats(rpg.max_period)
        self._synced: list[Unit] = []  # the units unit_repeats holds
        self._likeness: dict[tuple[str, str, str, str], float] = {}  # docstring pairs measured, by their texts
        self.append(prompt_ids)
        self.prompt_tokens = len(self.token_ids)

    def append(self, token_ids: Sequence[int]) -> None:
        data = bytearray()
        end = self.ends[-1] if self.ends else 0
        for token in token_ids:
            piece = self.token_bytes[token] if 0 <= token < len(self.token_bytes) else b""
            data += piece
            end += len(piece)
            self.token_ids.append(int(token))
            self.ends.append(end)
            if self.rpg.content:
                self.tokens.push(int(token))
        self.units.append(bytes(data))

    def rollback(self, count: int) -> None:
        if not 0 <= count <= len(self.token_ids):
            raise ValueError(f"cannot roll back {count} of {len(self.token_ids)} tokens")
        if count == 0:
            return
        del self.token_ids[-count:]
        del self.ends[-count:]
        self.prompt_tokens = min(self.prompt_tokens, len(self.token_ids))  # what is left of the prompt
        if self.rpg.content:
            self.tokens.pop(count)
        self.units.truncate(self.ends[-1] if self.ends else 0)

    def fork(self) -> RepetitionState:
        other = RepetitionState.__new__(RepetitionState)
        other.rpg = self.rpg
        other.token_bytes = self.token_bytes
        other.token_ids = list(self.token_ids)
        other.ends = list(self.ends)
        other.units = self.units.fork()
        other.tokens = self.tokens.fork()
        other.unit_repeats = self.unit_repeats.fork()
        other._synced = list(self._synced)
        other._likeness = self._likeness  # keyed by texts: valid for any fork
        other.prompt_tokens = self.prompt_tokens
        return other

    # -- the step ----------------------------------------------------------------------------

    def penalties(self) -> Penalties:
        """The decays and EOS boost for the token that comes next."""
        result = Penalties()
        if self.rpg.content:
            self._content_repeat(result)
        self._structural_repeat(result)
        return result

    def _content_repeat(self, result: Penalties) -> None:
        repeat = self.tokens.repeat()
        if repeat is not None and repeat.copies * repeat.period >= self.rpg.min_content_tokens:
            generated = self.tokens.occurrences(repeat.period, since=self.prompt_tokens)
            looped = max(repeat.repeated, (generated - 1) * repeat.period)
            result.decay[self.tokens.next_symbol(repeat)] = looped

    def _structural_repeat(self, result: Penalties) -> None:
        text = self.units.text
        gap = _whitespace_before(text, len(text))
        if b"\n" not in text[len(text) - gap:]:
            return  # mid-line: no statement can begin with the next token
        self.units.refresh()
        if self.units.code_end != len(text) - gap:
            return  # the last line is no complete statement (a continuation line, an open bracket)
        layout = _layout(bytes(text[len(text) - gap:]))
        self._tandem_repeat(result, layout)
        self._redefinition(result, layout)

    def _tandem_repeat(self, result: Penalties, layout: tuple[bool, bytes]) -> None:
        """The units end with back-to-back copies of a span: decay the token that began the last copy."""
        self._sync_unit_repeats()
        repeat = self.unit_repeats.repeat()
        if repeat is None:
            return
        critical = self._critical_token(self._synced[len(self._synced) - repeat.period].start, layout)
        if critical is None:
            return
        token = self.token_ids[critical]
        result.decay[token] = max(result.decay.get(token, 0), repeat.count)
        if self.units.complete:
            result.eos = repeat.count
            generated = self._generated_copies(repeat.period, repeat.copies)
            if generated:
                result.end_from, result.end_count = token, min(generated, repeat.count)

    def _redefinition(self, result: Penalties, layout: tuple[bool, bytes]) -> None:
        """The last statement at the next line's indentation is a definition the model wrote under a name its
        block already defined — dead code that replaces the first definition, the signature of a loop that
        rewrites a function (pyflakes calls it F811) — or one whose docstring nearly copies the previous
        definition's, the signature of a loop that writes function after function to one template. Like a
        verbatim loop it counts in tokens: every generated token of the definition repeats, so the token that
        began it is decayed by that many repetitions and, where the code could end, gives that share to
        end-of-sequence."""
        beside = self._statement_beside(layout)
        if beside is None:
            return
        last, critical = beside
        if last.name is None or not (self._redefines(last) or self._copies_docstring(last)):
            return
        count = len(self.token_ids) - max(critical, self.prompt_tokens)
        if count <= 0:
            return  # a definition written in the prompt is the user's
        token = self.token_ids[critical]
        result.decay[token] = max(result.decay.get(token, 0), count)
        if self.units.complete and count > result.end_count:
            result.end_from, result.end_count = token, count

    def _statement_beside(self, layout: tuple[bool, bytes]) -> tuple[Unit, int] | None:
        """The last statement at the level where the next line begins, and the token that began it.

        The candidates are the statements that end the code, from the innermost out (each at a smaller
        column than the one after it), down to the indentation typed so far; the one whose first token was
        preceded by whitespace laid out like the typed whitespace is the one beside which the next statement
        would begin. (Not simply the one at the typed column: a tokenizer may hold the last space of an
        indentation in the keyword's token, as SmolLM2's and Qwen's ``" def"`` do.)"""
        text, indent, innermost = self.units.text, len(layout[1]), None
        for unit in reversed(self.units.units):
            column = unit.start - line_start(text, unit.start)
            if innermost is not None and column >= innermost:
                continue  # inside a statement that comes later at a smaller column
            if column < indent:
                return None
            innermost = column
            critical = self._critical_token(unit.start, layout)
            if critical is not None:
                return unit, critical
        return None

    def _redefines(self, definition: Unit) -> bool:
        """Whether an earlier definition of the same block binds the same name."""
        return any(u.name == definition.name and u.scope == definition.scope and u.start < definition.start
                   for u in self.units.units)

    def _copies_docstring(self, definition: Unit) -> bool:
        """Whether ``definition``'s multi-line docstring is at least :attr:`RPG.copied_docstring` alike to that of
        the definition before it in its block (own names blanked out: :mod:`codemask.repetition.likeness`)."""
        threshold = self.rpg.copied_docstring
        if threshold is None:
            return False
        previous = next((u for u in reversed(self.units.units) if u.start < definition.start
                         and u.name is not None and u.scope == definition.scope), None)
        if previous is None:
            return False
        docstring = self.units.docstring(definition)
        if docstring is None or docstring.count("\n") < 2:
            return False
        earlier = self.units.docstring(previous)
        if earlier is None:
            return False
        key = (earlier, previous.name or "", docstring, definition.name or "")
        if key not in self._likeness:
            self._likeness[key] = likeness(words(earlier, key[1]), words(docstring, key[3]))
        return self._likeness[key] >= threshold

    def _critical_token(self, first: int, layout: tuple[bool, bytes]) -> int | None:
        """The index of the token that holds byte ``first`` (a unit's first byte) if it began the unit cleanly
        after whitespace laid out as ``layout`` (the whitespace typed since the code's last statement)."""
        text = self.units.text
        critical = bisect.bisect_right(self.ends, first)
        if critical >= len(self.token_ids):
            return None
        begins = self.ends[critical - 1] if critical else 0
        gap_start = first - _whitespace_before(text, first)
        if begins < gap_start:
            return None  # the token also holds the end of the statement before: no clean boundary
        if _layout(bytes(text[gap_start:begins])) != layout:
            return None
        return critical

    def _generated_copies(self, period: int, copies: int) -> int:
        """How many of the last ``copies`` copies of a ``period``-unit span begin after the prompt."""
        prompt_end = self.ends[self.prompt_tokens - 1] if self.prompt_tokens else 0
        starts = (self._synced[len(self._synced) - k * period].start for k in range(1, copies + 1))
        return sum(start >= prompt_end for start in starts)

    def _sync_unit_repeats(self) -> None:
        """Make ``unit_repeats`` hold the current units: pop what changed at the tail, push the new ones."""
        units, synced = self.units.units, self._synced
        same, limit = 0, min(len(units), len(synced))
        while same < limit and (units[same] is synced[same] or units[same] == synced[same]):
            same += 1
        self.unit_repeats.pop(len(synced) - same)
        self.unit_repeats.extend(_LABEL_IDS.setdefault(u.label, len(_LABEL_IDS)) for u in units[same:])
        self._synced = list(units)


def _whitespace_before(text: bytes | bytearray, at: int) -> int:
    """How many whitespace bytes end ``text[:at]``."""
    start = at
    while start > 0 and text[start - 1] in _WHITESPACE:
        start -= 1
    return at - start


def _layout(gap: bytes) -> tuple[bool, bytes]:
    """Whitespace as it matters for where a statement begins: whether it ends a line, and the indentation after."""
    return b"\n" in gap, gap[gap.rfind(b"\n") + 1:]
