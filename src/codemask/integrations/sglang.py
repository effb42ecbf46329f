"""codemask as SGLang's grammar backend (``--grammar-backend codemask``).

SGLang keeps a registry of out-of-tree grammar backends (``register_grammar_backend`` in
``sglang/srt/constrained/base_grammar_backend.py``) and runs the functions of the
``sglang.srt.plugins`` entry point group at start-up in every process. With codemask installed beside
SGLang, :func:`register` (that entry point) adds ``codemask`` to ``--grammar-backend``'s choices and to
the registry; SGLang then builds :class:`CodemaskGrammarBackend` with the model's tokenizer, logits
width and end-of-sequence ids.

Requests compile as in vLLM (:func:`codemask.integrations.specs.grammar_for`): ``json`` (``$$ANY$$``
is any JSON value), ``regex``, ``ebnf`` (EBNF/GBNF, or Lark text) and ``structural_tag``.
``--constrained-json-disable-any-whitespace`` compiles JSON without whitespace. Jump-forward
returns the string the grammar forces, as SGLang's xgrammar backend does.

SGLang wraps only its built-in backends in its reasoning-parser gate (``create_grammar_backend``
returns a registered backend as it is), so with ``--reasoning-parser`` the grammar applies from the
first token. Written against SGLang 0.5.23's sources; not exercised here against a running SGLang.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from sglang.srt.constrained.base_grammar_backend import (
    BaseGrammarBackend,
    BaseGrammarObject,
    InvalidGrammarObject,
    register_grammar_backend,
)

from codemask.compilers import compiler_for
from codemask.engine.bitmask import allocate_token_bitmask, apply_token_bitmask_
from codemask.engine.compiler import CompiledGrammar
from codemask.errors import CodemaskError
from codemask.grammar.grammar import Grammar
from codemask.integrations.matching import RequestMatcher
from codemask.integrations.specs import JsonOptions, grammar_for, grammar_from_text

__all__ = ["BACKEND_NAME", "CodemaskGrammarBackend", "CodemaskGrammarObject", "register"]

BACKEND_NAME = "codemask"
ANY_JSON = "$$ANY$$"  # SGLang's key for "any JSON value" (response_format json_object)

logger = logging.getLogger(__name__)


class CodemaskGrammarObject(BaseGrammarObject):
    """One request's grammar: a :class:`RequestMatcher` behind SGLang's method names."""

    def __init__(self, compiled: CompiledGrammar, stop_token_ids: set[int] | None, vocab_size: int) -> None:
        super().__init__()
        self.compiled = compiled
        self.stop_token_ids = stop_token_ids
        self.vocab_size = vocab_size
        self.matcher = RequestMatcher(compiled, stop_token_ids, vocab_size)

    def accept_token(self, token: int) -> None:
        """Advance by ``token``; a token the mask forbade is a ValueError, as in SGLang's xgrammar backend."""
        if self.matcher.is_terminated():
            return
        self.current_token = token
        if not self.matcher.accept(token):
            raise ValueError(f"codemask: the grammar refuses token {token}")

    def rollback(self, k: int) -> None:
        self.matcher.rollback(k)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def allocate_vocab_mask(self, vocab_size: int, batch_size: int, device: Any) -> torch.Tensor:
        return allocate_token_bitmask(batch_size, self.vocab_size)

    def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
        self.matcher.fill_row(vocab_mask, idx)

    @staticmethod
    def reset_vocab_mask(vocab_mask: torch.Tensor) -> None:
        vocab_mask.fill_(-1)

    @staticmethod
    def move_vocab_mask(vocab_mask: torch.Tensor, device: Any) -> torch.Tensor:
        return vocab_mask.to(device, non_blocking=True)

    @staticmethod
    def apply_vocab_mask(logits: torch.Tensor, vocab_mask: torch.Tensor) -> None:
        apply_token_bitmask_(logits, vocab_mask)

    def copy(self) -> CodemaskGrammarObject:
        """A fresh request of the same compiled grammar (SGLang copies its cached template per request)."""
        return CodemaskGrammarObject(self.compiled, self.stop_token_ids, self.vocab_size)

    def try_jump_forward(self, tokenizer: Any) -> tuple[list[int], str] | None:
        forced = self.matcher.jump_forward_bytes().decode("utf-8", errors="ignore")
        return ([], forced) if forced else None

    def jump_forward_str_state(self, helper: tuple[list[int], str]) -> tuple[str, int]:
        return helper[1], -1

    def jump_and_retokenize(self, old_output_ids: list[int], new_output_ids: list[int], next_state: int) -> None:
        """Roll back to the common prefix of the old and re-tokenized outputs, then accept the new tokens."""
        common = 0
        for old, new in zip(old_output_ids, new_output_ids, strict=False):
            if old != new:
                break
            common += 1
        self.matcher.rollback(len(old_output_ids) - common)
        for token in new_output_ids[common:]:
            if not self.matcher.accept(token):
                raise ValueError(f"codemask: the grammar refuses re-tokenized token {token}")


class CodemaskGrammarBackend(BaseGrammarBackend):
    """SGLang's engine-level backend: one codemask compiler for the model's tokenizer and logits width."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: set[int] | None = None,
                 whitespace: str = "flexible") -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.stop_token_ids = set(eos_token_ids) if eos_token_ids else None
        self.json_options = JsonOptions(whitespace="compact" if whitespace == "compact" else "flexible")
        self.compiler = compiler_for(tokenizer, vocab_size)

    def _object(self, build: Any, *args: Any) -> BaseGrammarObject:
        try:
            grammar: Grammar = build(*args)
            return CodemaskGrammarObject(self.compiler.compile(grammar), self.stop_token_ids, self.vocab_size)
        except (CodemaskError, ValueError, TypeError) as exc:
            logger.error("codemask: invalid grammar request: %s", exc)
            return InvalidGrammarObject(str(exc))

    def dispatch_json(self, key_string: str) -> BaseGrammarObject:
        if key_string == ANY_JSON:
            return self._object(Grammar.builtin, "json")
        return self._object(grammar_for, "json", key_string, self.json_options)

    def dispatch_regex(self, key_string: str) -> BaseGrammarObject:
        return self._object(grammar_for, "regex", key_string)

    def dispatch_ebnf(self, key_string: str) -> BaseGrammarObject:
        return self._object(grammar_from_text, key_string)

    def dispatch_structural_tag(self, key_string: str) -> BaseGrammarObject:
        return self._object(grammar_for, "structural_tag", key_string)


def create_backend(server_args: Any, tokenizer: Any, vocab_size: int,
                   eos_token_ids: set[int] | None = None) -> CodemaskGrammarBackend:
    """SGLang's factory call for a registered backend."""
    compact = getattr(server_args, "constrained_json_disable_any_whitespace", False)
    return CodemaskGrammarBackend(tokenizer, vocab_size, eos_token_ids, "compact" if compact else "flexible")


def register() -> None:
    """The ``sglang.srt.plugins`` entry point: ``--grammar-backend codemask`` becomes a choice."""
    from sglang.srt.arg_groups.choices import GRAMMAR_BACKEND_CHOICES

    if BACKEND_NAME not in GRAMMAR_BACKEND_CHOICES:
        GRAMMAR_BACKEND_CHOICES.append(BACKEND_NAME)
    register_grammar_backend(BACKEND_NAME, create_backend)
