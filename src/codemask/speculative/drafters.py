"""Drafters: cheap guesses of the next tokens, which the target model then verifies in one forward pass.

A :class:`Drafter` is configuration (what to draft from, how long); :meth:`Drafter.start` makes
the per-sequence :class:`DraftState` for one generation, which learns every committed token and
proposes continuations of *prompt + output + draft so far*. Guesses only cost verification width:
a wrong draft never changes the output, because the verifier keeps only what the target model
confirms.

- :class:`GrammarDrafter` — the bytes the grammar forces from here, tokenised canonically.
- :class:`PromptLookupDrafter` — the tokens that followed the most recent earlier occurrence of the
  last n tokens (prompt lookup decoding; n from ``max_ngram`` down to ``min_ngram``).
- :class:`SuffixDrafter` — the continuation of the longest earlier match of the whole suffix, from
  a :class:`~codemask.speculative.automaton.SuffixAutomaton` over optional extra context (workspace
  files), the prompt and the output.
- :class:`ModelDrafter` — a small draft model sharing the target's tokenizer, greedy, masked by the
  grammar.
- :class:`ChainDrafter` — several drafters, the first with something to say at each point wins; a
  draft is extended chunk by chunk (a context match, then what the grammar forces after it, …).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from codemask.decoding import kv
from codemask.engine.bitmask import allocate_token_bitmask, apply_token_bitmask_
from codemask.engine.matcher import GrammarMatcher
from codemask.speculative.automaton import SEPARATOR, SuffixAutomaton

DEFAULT_MAX_DRAFT = 12


@dataclass(frozen=True)
class DraftEnv:
    """What drafters may use: the target's tokenizer, its token bytes and stop tokens."""

    tokenizer: Any
    token_bytes: Sequence[bytes]
    stop_token_ids: frozenset[int]

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))


class DraftState(ABC):
    """One sequence's drafting state during one generation."""

    def commit(self, token_ids: Sequence[int]) -> None:  # noqa: B027 - optional hook
        """``token_ids`` were appended to the sequence (default: nothing to track)."""

    @abstractmethod
    def propose(self, draft: Sequence[int], matcher: GrammarMatcher | None, limit: int) -> list[int]:
        """Up to ``limit`` tokens that may follow prompt + output + ``draft``.

        ``matcher`` (None without a grammar) stands after all of it; do not advance it (fork it).
        """


class Drafter(ABC):
    """A drafting strategy. ``max_tokens`` caps the draft length the adaptive schedule may reach."""

    max_tokens: int = DEFAULT_MAX_DRAFT

    @abstractmethod
    def start(self, prompt_ids: Sequence[int], env: DraftEnv) -> DraftState:
        """The state for one sequence whose prompt is ``prompt_ids``."""


# -- grammar ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class GrammarDrafter(Drafter):
    """Drafts what the grammar forces (``find_jump_forward_bytes``), tokenised as the tokenizer would."""

    max_tokens: int = DEFAULT_MAX_DRAFT

    def start(self, prompt_ids: Sequence[int], env: DraftEnv) -> DraftState:
        return _GrammarState(env)


class _GrammarState(DraftState):
    def __init__(self, env: DraftEnv) -> None:
        self.env = env

    def propose(self, draft: Sequence[int], matcher: GrammarMatcher | None, limit: int) -> list[int]:
        if matcher is None or matcher.is_terminated():
            return []
        forced = matcher.find_jump_forward_bytes()
        if not forced:
            return []
        try:
            tokens = self.env.encode(forced.decode("utf-8"))
        except UnicodeDecodeError:
            return []
        if b"".join(self.env.token_bytes[t] for t in tokens) != forced:
            return []
        return tokens[:limit]


# -- context ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptLookupDrafter(Drafter):
    """Prompt lookup over prompt + output: the most recent earlier occurrence of the last n tokens."""

    max_ngram: int = 4
    min_ngram: int = 2
    max_tokens: int = DEFAULT_MAX_DRAFT

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {self.min_ngram}, {self.max_ngram}")

    def start(self, prompt_ids: Sequence[int], env: DraftEnv) -> DraftState:
        return _NgramState(self, prompt_ids)


class _NgramState(DraftState):
    """Per n, a dict from n-gram to the end index of its latest occurrence that has a continuation."""

    def __init__(self, config: PromptLookupDrafter, prompt_ids: Sequence[int]) -> None:
        self.config = config
        self.text: list[int] = []
        self.index: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(config.min_ngram, config.max_ngram + 1)}
        self.commit(prompt_ids)

    def commit(self, token_ids: Sequence[int]) -> None:
        for token in token_ids:
            end = len(self.text) - 1  # the n-grams ending here now have a continuation: ``token``
            for n, table in self.index.items():
                if end + 1 >= n:
                    table[tuple(self.text[end + 1 - n: end + 1])] = end
            self.text.append(int(token))

    def propose(self, draft: Sequence[int], matcher: GrammarMatcher | None, limit: int) -> list[int]:
        tail = (self.text[-self.config.max_ngram:] + list(draft))[-self.config.max_ngram:]
        for n in range(min(self.config.max_ngram, len(tail)), self.config.min_ngram - 1, -1):
            end = self.index[n].get(tuple(tail[-n:]))
            if end is not None:
                return self.text[end + 1: end + 1 + limit]
        return []


@dataclass(frozen=True)
class SuffixDrafter(Drafter):
    """The longest earlier match of the whole suffix (a suffix automaton), over extra ``context`` texts
    (e.g. workspace files), the prompt and the output. Drafts only from matches of ``min_match``
    tokens or more: shorter ones are mostly coincidences that cost verification width."""

    context: tuple[str, ...] = ()
    min_match: int = 3
    max_tokens: int = DEFAULT_MAX_DRAFT

    def start(self, prompt_ids: Sequence[int], env: DraftEnv) -> DraftState:
        automaton = SuffixAutomaton()
        for text in self.context:
            automaton.extend([*env.encode(text), SEPARATOR])
        automaton.extend(prompt_ids)
        return _SuffixState(automaton, self.min_match)


class _SuffixState(DraftState):
    def __init__(self, automaton: SuffixAutomaton, min_match: int) -> None:
        self.automaton = automaton
        self.min_match = min_match

    def commit(self, token_ids: Sequence[int]) -> None:
        self.automaton.extend(int(t) for t in token_ids)

    def propose(self, draft: Sequence[int], matcher: GrammarMatcher | None, limit: int) -> list[int]:
        return self.automaton.continuation(draft, limit, self.min_match)


# -- a draft model ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelDrafter(Drafter):
    """A small model that shares the target's tokenizer drafts greedily, masked by the grammar.

    Its KV cache holds the committed tokens; each proposal extends it with the draft and crops it
    back afterwards. Worth it on an accelerator with a much smaller draft model; on a CPU its own
    forward passes usually cost more than the target's passes they save.
    """

    model: Any
    max_tokens: int = 6

    def start(self, prompt_ids: Sequence[int], env: DraftEnv) -> DraftState:
        return _ModelState(self.model, prompt_ids, env)


class _ModelState(DraftState):
    """The draft model's cache holds every committed token but the last, which each proposal feeds
    again (so a proposal always has a token to feed, draft or not)."""

    def __init__(self, model: Any, prompt_ids: Sequence[int], env: DraftEnv) -> None:
        self.model = model
        self.env = env
        self.device = next(model.parameters()).device
        self.cache = kv.new_cache(model)
        self.tokens: list[int] = list(prompt_ids)
        self.bitmask: torch.Tensor | None = None

    def commit(self, token_ids: Sequence[int]) -> None:
        self.tokens += [int(t) for t in token_ids]

    def propose(self, draft: Sequence[int], matcher: GrammarMatcher | None, limit: int) -> list[int]:
        if limit < 1:
            return []
        probe = matcher.fork() if matcher is not None else None
        feed = self.tokens[self.cache.get_seq_length():] + list(draft)
        out: list[int] = []
        while len(out) < limit:
            token = self._next(feed, probe)
            if token is None or token in self.env.stop_token_ids:
                break
            out.append(token)
            feed = [token]
        extra = self.cache.get_seq_length() - (len(self.tokens) - 1)
        if extra > 0:
            self.cache.crop(-extra)
        return out

    def _next(self, feed: list[int], probe: GrammarMatcher | None) -> int | None:
        ids = torch.tensor([feed], dtype=torch.long, device=self.device)
        raw, self.cache = kv.run_model(self.model, self.cache, input_ids=ids, logits_to_keep=1)
        logits = raw[:, -1, :].float()
        if probe is not None:
            if probe.is_terminated():
                return None
            if self.bitmask is None:
                self.bitmask = allocate_token_bitmask(1, probe.compiled.vocab.vocab_size)
            probe.fill_next_token_bitmask(self.bitmask, 0)
            apply_token_bitmask_(logits, self.bitmask.to(logits.device),
                                 vocab_size=min(probe.compiled.vocab.vocab_size, logits.shape[-1]))
        if not torch.isfinite(logits.max()):
            return None
        token = int(logits.argmax(dim=-1))
        if probe is not None and not probe.accept_token(token):
            return None
        return token


# -- combining -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainDrafter(Drafter):
    """Several drafters; at each point of the draft the first that proposes something extends it.

    Each chunk is cut where the grammar refuses it, so a context match that runs into a forced
    stretch stops there and the grammar's own continuation takes over.
    """

    drafters: tuple[Drafter, ...]
    max_tokens: int = DEFAULT_MAX_DRAFT

    def start(self, prompt_ids: Sequence[int], env: DraftEnv) -> DraftState:
        return _ChainState([d.start(prompt_ids, env) for d in self.drafters], env)


class _ChainState(DraftState):
    def __init__(self, states: list[DraftState], env: DraftEnv) -> None:
        self.states = states
        self.env = env

    def commit(self, token_ids: Sequence[int]) -> None:
        for state in self.states:
            state.commit(token_ids)

    def propose(self, draft: Sequence[int], matcher: GrammarMatcher | None, limit: int) -> list[int]:
        probe = matcher.fork() if matcher is not None else None
        out: list[int] = []
        while len(out) < limit:
            chunk: list[int] = []
            for state in self.states:
                chunk = grammar_prefix(state.propose([*draft, *out], probe, limit - len(out)), probe,
                                       self.env.stop_token_ids)
                if chunk:
                    break
            if not chunk:
                break
            out += chunk
        return out


def grammar_prefix(tokens: Sequence[int], matcher: GrammarMatcher | None, stop_token_ids: frozenset[int]) -> list[int]:
    """The longest prefix of ``tokens`` without stop tokens that ``matcher`` accepts; advances ``matcher`` over it."""
    out: list[int] = []
    for token in tokens:
        if token in stop_token_ids or (matcher is not None and (matcher.is_terminated()
                                                                or not matcher.accept_token(int(token)))):
            break
        out.append(int(token))
    return out


def auto_drafter() -> Drafter:
    """What ``speculative="auto"`` uses: forced grammar text, then the longest context match (3 tokens
    or more), then what followed the last 2 or 1 tokens before.

    The short n-grams guess where nothing longer matches — a JSON value's indentation and quotes
    after a newline seen once already. They are right about half the time, which pays on a CPU
    because a pass of 2 or 3 tokens costs hardly more than one (:class:`~codemask.speculative.verify.PassCost`
    measures that, and the draft length adapts to it): on the Qwen2.5-Coder JSON-schema tasks of
    ``benchmarks/speculative.py --models qwen-coder`` they took forward passes per token from 0.62
    to 0.57."""
    return ChainDrafter((GrammarDrafter(), SuffixDrafter(), PromptLookupDrafter(max_ngram=2, min_ngram=1)))
