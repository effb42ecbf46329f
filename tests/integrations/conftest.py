"""vLLM as the engine runs it, on a CPU: plugins loaded by vLLM itself, real configs, a real tokenizer.

These tests need vLLM's Python modules, which live in ``.venv-vllm`` (``bash scripts/setup.sh
--with vllm``; ``scripts/test.sh`` runs them there). The main ``.venv`` does not collect this folder
(``tests/conftest.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # VllmConfig cannot infer a device on a CPU-only machine
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from vllm.config import ModelConfig, SpeculativeConfig, StructuredOutputsConfig, VllmConfig
from vllm.plugins import load_general_plugins
from vllm.sampling_params import SamplingParams, StructuredOutputsParams
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from codemask.assets import model_dir, tokenizer_dir
from codemask.engine.compiler import GrammarCompiler
from codemask.engine.matcher import GrammarMatcher
from codemask.grammar.grammar import Grammar
from codemask.vocab import Vocabulary

load_general_plugins()  # as every vLLM process does at start-up: runs codemask's entry point

# Qwen2.5-Coder's config (151,936 logits) with Qwen3's tokenizer (151,669 ids, <think> tokens for the
# reasoning parser): masks wider than the tokenizer, as with most served models.


@pytest.fixture(scope="session")
def model_config() -> ModelConfig:
    return ModelConfig(model=str(model_dir("qwen-coder")), tokenizer=str(tokenizer_dir("qwen3")))


@dataclass
class Engine:
    """vLLM's structured-output manager over one config, and requests made as its input processor makes them."""

    config: VllmConfig
    manager: StructuredOutputManager

    @property
    def tokenizer(self) -> Any:
        return self.manager.tokenizer

    @property
    def vocab_size(self) -> int:
        return int(self.config.model_config.get_vocab_size())

    def params(self, stop_token_ids: list[int] | None = None, **constraint: Any) -> SamplingParams:
        """SamplingParams verified and completed as vLLM's input processor does for a request."""
        params = SamplingParams(max_tokens=256, stop_token_ids=stop_token_ids,
                                structured_outputs=StructuredOutputsParams(**constraint))
        params.verify(self.config.model_config, self.config.speculative_config,
                      self.config.structured_outputs_config, self.tokenizer)
        params.update_from_generation_config({}, self.tokenizer.eos_token_id)
        return params

    def request(self, request_id: str, prompt: Iterable[int] = (1, 2, 3), stop_token_ids: list[int] | None = None,
                **constraint: Any) -> Request:
        """A request whose grammar the manager has compiled (grammar_init, then the compile future)."""
        request = Request(request_id, list(prompt), self.params(stop_token_ids, **constraint), None)
        self.manager.grammar_init(request)
        pending = request.structured_output_request._grammar
        if isinstance(pending, Future):
            pending.result(timeout=300)
        return request

    def bitmask(self, requests: list[Request], drafts: dict[str, list[int]] | None = None) -> np.ndarray:
        """The scheduler's call: one bitmask for the batch's structured-output requests."""
        by_id = {r.request_id: r for r in requests}
        return self.manager.grammar_bitmask(by_id, list(by_id), drafts or {})


@pytest.fixture(scope="session")
def make_engine(model_config: ModelConfig) -> Callable[..., Engine]:
    made: dict[tuple[Any, ...], Engine] = {}

    def make(speculative_tokens: int = 0, **structured: Any) -> Engine:
        key = (speculative_tokens, tuple(sorted(structured.items())))
        if key not in made:
            speculative = None
            if speculative_tokens:
                speculative = SpeculativeConfig(method="ngram", num_speculative_tokens=speculative_tokens,
                                                prompt_lookup_max=3, prompt_lookup_min=1)
            config = VllmConfig(model_config=model_config, speculative_config=speculative,
                                structured_outputs_config=StructuredOutputsConfig(backend="codemask", **structured))
            made[key] = Engine(config, StructuredOutputManager(config))
        return made[key]

    return make


@pytest.fixture(scope="session")
def engine(make_engine: Callable[..., Engine]) -> Engine:
    return make_engine()


class Oracle:
    """codemask's own GrammarMatcher on a vocabulary whose stop tokens are the request's: the mask the
    backend must reproduce, compiled by a compiler of its own (no cache shared with the backend)."""

    _compilers: ClassVar[dict[tuple[int, frozenset[int]], GrammarCompiler]] = {}

    def __init__(self, engine: Engine, grammar: Grammar, stops: Iterable[int]) -> None:
        key = (id(engine.tokenizer), frozenset(stops))
        if key not in self._compilers:
            vocab = Vocabulary.from_tokenizer(engine.tokenizer, vocab_size=engine.vocab_size, stop_token_ids=key[1])
            self._compilers[key] = GrammarCompiler(vocab, cache_dir=False, progress=False)
        self.matcher = GrammarMatcher(self._compilers[key].compile(grammar))
        self.width = engine.vocab_size

    def row(self) -> np.ndarray:
        out = np.zeros((1, (self.width + 31) // 32), dtype=np.int32)
        self.matcher.fill_next_token_bitmask(out, 0)
        return out[0]


def allowed(row: np.ndarray) -> np.ndarray:
    """The token ids a bitmask row allows."""
    bits = np.unpackbits(row.view(np.uint8), bitorder="little")
    return np.flatnonzero(bits)


def logits_like(engine: Engine, rows: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(rows, engine.vocab_size, generator=torch.Generator().manual_seed(seed))
