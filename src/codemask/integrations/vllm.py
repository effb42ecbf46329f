"""codemask as vLLM's structured-output backend, and RPG and monitors as a vLLM logits processor.

With codemask installed in vLLM's environment::

    vllm serve MODEL --structured-outputs-config '{"backend": "codemask"}'

Requests then constrain as with xgrammar (``response_format``, ``structured_outputs``: JSON Schema,
``json_object``, regex, EBNF/GBNF or Lark grammar, choice), and vLLM's tensor and pipeline parallel
serving, batching, speculative decoding and reasoning parsers work as with its own backends.

How it plugs in: vLLM picks a backend by a fixed chain of names (``StructuredOutputManager.grammar_init``)
and its config accepts only those names. The ``vllm.general_plugins`` entry point, which vLLM runs at
start-up in every process, calls :func:`register`, which changes three things and nothing else:

1. ``StructuredOutputsConfig.backend`` also accepts ``"codemask"``, and the config's check that only
   xgrammar and guidance honour ``disable_any_whitespace`` / ``disable_additional_properties`` lets
   codemask pass (it honours both);
2. ``SamplingParams._validate_structured_outputs`` validates a request for the codemask backend by
   building its grammar with codemask's front-ends (other backends are validated as before);
3. ``StructuredOutputManager.grammar_init`` constructs :class:`CodemaskBackend` for such requests, as
   it constructs its own backends, then runs unchanged.

Each step first checks that the vLLM internal it touches is as this module expects, and raises
:class:`IncompatibleVllmError` naming the installed vLLM version when it is not, so a vLLM upgrade
that moves them fails at start-up rather than serving unconstrained output.

Reasoning models: vLLM's manager itself holds a request's grammar back until its reasoning parser
sees the end of the reasoning (``StructuredOutputsConfig.reasoning_parser``; ``enable_in_reasoning``
constrains the reasoning too), and asks the backend through ``validate_tokens`` which tokens may end
it. Nothing of that is the backend's: it works for codemask as for xgrammar.

The logits processor, :class:`CodemaskLogitsProcessor`, is loaded by vLLM from the
``vllm.logits_processors`` entry point in every engine; it does nothing unless a request asks for it
through ``SamplingParams.extra_args["codemask"]`` (see :func:`request_options`). vLLM does not run
custom logits processors when speculative decoding is on.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates
from vllm.v1.structured_output.backend_types import (
    StructuredOutputBackend,
    StructuredOutputGrammar,
    StructuredOutputOptions,
)

from codemask.compilers import compiler_for, ordered_stop_token_ids
from codemask.engine.bitmask import allocate_token_bitmask
from codemask.engine.token_trie import ByteVocabulary
from codemask.errors import CodemaskError
from codemask.integrations.matching import RequestMatcher
from codemask.integrations.specs import JsonOptions, grammar_for
from codemask.monitors import for_workspace
from codemask.monitors.stage import MonitorSet, MonitorStats, apply_unless_empty, decode_text
from codemask.repetition.config import RPG
from codemask.repetition.stage import apply_penalties_
from codemask.repetition.state import Penalties, RepetitionState

__all__ = [
    "BACKEND_NAME",
    "CodemaskBackend",
    "CodemaskGrammar",
    "CodemaskLogitsProcessor",
    "IncompatibleVllmError",
    "register",
    "request_options",
]

BACKEND_NAME = "codemask"
EXTRA_ARGS_KEY = "codemask"
"""The key of ``SamplingParams.extra_args`` that :class:`CodemaskLogitsProcessor` reads."""

logger = logging.getLogger(__name__)

_KINDS = {
    StructuredOutputOptions.JSON: "json",
    StructuredOutputOptions.JSON_OBJECT: "json_object",
    StructuredOutputOptions.REGEX: "regex",
    StructuredOutputOptions.GRAMMAR: "grammar",
    StructuredOutputOptions.CHOICE: "choice",
    StructuredOutputOptions.STRUCTURAL_TAG: "structural_tag",
}


class IncompatibleVllmError(RuntimeError):
    """The installed vLLM's internals are not those :func:`register` was written against."""

    def __init__(self, what: str) -> None:
        super().__init__(f"codemask's vLLM plugin supports vLLM 0.33; the installed vLLM {vllm_version()} {what}. "
                         "Pin vllm==0.33.* or upgrade codemask.")


def vllm_version() -> str:
    """The installed vLLM's version."""
    return importlib.metadata.version("vllm")


# -- the backend ---------------------------------------------------------------------------------


@dataclass
class CodemaskBackend(StructuredOutputBackend):
    """vLLM's engine-level backend: one codemask compiler for the model's tokenizer and logits width.

    Constructed as vLLM constructs its backends, ``CodemaskBackend(vllm_config, tokenizer=...,
    vocab_size=model_config.get_vocab_size())``. ``disable_any_whitespace`` compiles JSON without
    whitespace. JSON objects are closed unless the schema opens them (``additionalProperties``), so
    ``disable_additional_properties`` holds whichever way it is set.
    """

    def __post_init__(self) -> None:
        config = self.vllm_config.structured_outputs_config
        self.json_options = JsonOptions(whitespace="compact" if config.disable_any_whitespace else "flexible")
        try:
            self.compiler = compiler_for(self.tokenizer, self.vocab_size)
        except CodemaskError as exc:
            raise ValueError(f"the codemask structured-output backend cannot read this tokenizer: {exc}") from None

    def compile_grammar(self, request_type: StructuredOutputOptions, grammar_spec: str,
                        stop_token_ids: set[int] | None = None) -> CodemaskGrammar:
        """The request's grammar, allowing exactly ``stop_token_ids`` (else the vocabulary's) where it may end."""
        kind = _KINDS.get(request_type)
        if kind is None:
            raise ValueError(f"unknown structured-output request type {request_type!r}")
        compiled = self.compiler.compile(grammar_for(kind, grammar_spec, self.json_options))
        return CodemaskGrammar(RequestMatcher(compiled, stop_token_ids, self.vocab_size))

    def allocate_token_bitmask(self, max_num_seqs: int) -> torch.Tensor:
        """An int32 ``[max_num_seqs, ceil(vocab_size / 32)]`` bitmask on the CPU, every token allowed."""
        return allocate_token_bitmask(max_num_seqs, self.vocab_size)

    def destroy(self) -> None:
        """Nothing to free: compiled grammars stay cached with the tokenizer's shared compiler."""


class CodemaskGrammar(StructuredOutputGrammar):
    """vLLM's request-level grammar: a :class:`RequestMatcher` behind vLLM's method names.

    As vLLM's xgrammar backend: tokens after termination are ignored by ``accept_tokens``, and
    ``validate_tokens`` returns the accepted prefix (up to and including a stop token) without
    advancing. Speculative decoding's ``fill_bitmask``/``accept_tokens([t])``/``rollback(n)`` walk is
    cheap: the matcher's state is a list of interned parser states, and masks are cached per state.
    """

    def __init__(self, matcher: RequestMatcher) -> None:
        self.matcher = matcher

    def accept_tokens(self, request_id: str, tokens: list[int]) -> bool:
        for token in tokens:
            if self.matcher.is_terminated():
                return True
            if not self.matcher.accept(token):
                logger.error("codemask: request %s: the grammar refuses token %s", request_id, token)
                return False
        return True

    def validate_tokens(self, tokens: list[int]) -> list[int]:
        accepted = 0
        for token in tokens:
            if self.matcher.is_terminated() or not self.matcher.accept(token):
                break
            accepted += 1
        self.matcher.rollback(accepted)
        return tokens[:accepted]

    def rollback(self, num_tokens: int) -> None:
        self.matcher.rollback(num_tokens)

    def fill_bitmask(self, bitmask: torch.Tensor, batch_index: int) -> None:
        self.matcher.fill_row(bitmask, batch_index)

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def reset(self) -> None:
        self.matcher.reset()


# -- the plugin ----------------------------------------------------------------------------------

_REGISTER_LOCK = threading.Lock()
_PATCHED = "__codemask_patched__"


def register() -> None:
    """Make ``backend="codemask"`` selectable in this process (the ``vllm.general_plugins`` entry point).

    Idempotent. Raises :class:`IncompatibleVllmError` where vLLM's internals differ from vLLM 0.33's.
    The offline ``vllm.LLM`` builds its configs before it loads plugins: call this (or
    ``vllm.plugins.load_general_plugins()``) before ``LLM(..., structured_outputs_config=...)``.
    """
    with _REGISTER_LOCK:
        _allow_backend_name()
        _validate_requests_for_codemask()
        _construct_backend_in_manager()


def _allow_backend_name() -> None:
    """``StructuredOutputsConfig.backend`` accepts "codemask"; the whitespace/properties check lets it pass."""
    from pydantic.dataclasses import rebuild_dataclass
    from vllm.config import VllmConfig
    from vllm.config.structured_outputs import StructuredOutputsConfig

    fields = getattr(StructuredOutputsConfig, "__dataclass_fields__", {})
    validators = getattr(getattr(StructuredOutputsConfig, "__pydantic_decorators__", None), "model_validators", {})
    check = validators.get("_validate_structured_output_config")
    if "backend" not in fields or check is None:
        raise IncompatibleVllmError("has no StructuredOutputsConfig.backend field or its validator")
    names = get_args(fields["backend"].type)
    if "xgrammar" not in names:
        raise IncompatibleVllmError(f"declares StructuredOutputsConfig.backend as {fields['backend'].type!r}, "
                                    "not a Literal of backend names")
    if BACKEND_NAME in names:
        return
    widened = Literal[(*names, BACKEND_NAME)]  # type: ignore[valid-type]
    StructuredOutputsConfig.__annotations__["backend"] = widened
    fields["backend"].type = widened
    check.func = _codemask_passes(check.func)
    rebuild_dataclass(StructuredOutputsConfig, force=True)
    rebuild_dataclass(VllmConfig, force=True)  # it embeds the config's validator


def _codemask_passes(validate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def validate_config(config: Any) -> Any:
        return config if config.backend == BACKEND_NAME else validate(config)

    return validate_config


def _validate_requests_for_codemask() -> None:
    """Requests for the codemask backend are validated by building their grammar with codemask."""
    from vllm.sampling_params import SamplingParams, StructuredOutputsParams

    original = getattr(SamplingParams, "_validate_structured_outputs", None)
    if original is None or "_backend" not in getattr(StructuredOutputsParams, "__dataclass_fields__", {}):
        raise IncompatibleVllmError("has no SamplingParams._validate_structured_outputs or "
                                    "StructuredOutputsParams._backend")
    if getattr(original, _PATCHED, False):
        return

    def _validate_structured_outputs(self: Any, model_config: Any, structured_outputs_config: Any,
                                     tokenizer: Any) -> None:
        if (structured_outputs_config is None or self.structured_outputs is None
                or structured_outputs_config.backend != BACKEND_NAME):
            return original(self, model_config, structured_outputs_config, tokenizer)
        _validate_request(self.structured_outputs, model_config, tokenizer)
        return None

    setattr(_validate_structured_outputs, _PATCHED, True)
    SamplingParams._validate_structured_outputs = _validate_structured_outputs


def _validate_request(params: Any, model_config: Any, tokenizer: Any) -> None:
    """What vLLM checks for every backend, then codemask's own front-ends on the request's grammar."""
    from vllm.exceptions import VLLMValidationError
    from vllm.sampling_params import check_json_nesting
    from vllm.v1.structured_output.request import get_structured_output_key

    if getattr(model_config, "is_diffusion", False):
        raise VLLMValidationError("Structured outputs are not supported for diffusion language models.")
    if tokenizer is None:
        raise VLLMValidationError("Structured outputs need a tokenizer, so they cannot be used with "
                                  "skip_tokenizer_init")
    if params._backend and params._backend != BACKEND_NAME:
        raise VLLMValidationError(f"Request-level structured output backend selection is not supported: the "
                                  f"request names {params._backend!r}, the engine runs {BACKEND_NAME!r}.")
    params._backend = BACKEND_NAME
    check_json_nesting(params.json)
    check_json_nesting(params.structural_tag, structural_tag=True)
    try:
        request_type, spec = get_structured_output_key(params)
        grammar_for(_KINDS[request_type], spec)
    except (ValueError, TypeError, KeyError) as exc:
        raise VLLMValidationError(f"codemask cannot use this structured-output request: {exc}") from exc
    params.__post_init__()


def _construct_backend_in_manager() -> None:
    """``grammar_init`` constructs :class:`CodemaskBackend` for codemask requests, then runs as before."""
    from vllm.v1.structured_output import StructuredOutputManager

    original = getattr(StructuredOutputManager, "grammar_init", None)
    if original is None:
        raise IncompatibleVllmError("has no StructuredOutputManager.grammar_init")
    if getattr(original, _PATCHED, False):
        return

    def grammar_init(self: Any, request: Any) -> None:
        if request.structured_output_request is not None and getattr(self, "backend", None) is None:
            params = request.sampling_params.structured_outputs
            if getattr(params, "_backend", None) == BACKEND_NAME:
                _install_backend(self)
        return original(self, request)

    setattr(grammar_init, _PATCHED, True)
    StructuredOutputManager.grammar_init = grammar_init


def _install_backend(manager: Any) -> None:
    missing = [name for name in ("vllm_config", "tokenizer", "backend_name") if not hasattr(manager, name)]
    if missing:
        raise IncompatibleVllmError(f"has a StructuredOutputManager without {', '.join(missing)}")
    manager.backend = CodemaskBackend(manager.vllm_config, tokenizer=manager.tokenizer,
                                      vocab_size=manager.vllm_config.model_config.get_vocab_size())
    manager.backend_name = BACKEND_NAME


# -- the logits processor ------------------------------------------------------------------------


@dataclass(frozen=True)
class MonitorOptions:
    """Where a request's code goes: a language server on ``workspace`` completes ``file``."""

    workspace: str
    file: str
    language: str = "python"
    server: str | None = None
    prefix: str | None = None
    suffix: str = ""
    timeout_s: float | None = None


@dataclass(frozen=True)
class RequestOptions:
    """What :class:`CodemaskLogitsProcessor` applies to one request."""

    rpg: RPG | None = None
    monitors: MonitorOptions | None = None


def request_options(extra_args: Mapping[str, Any] | None) -> RequestOptions | None:
    """The codemask options of a request's ``SamplingParams.extra_args`` (None: it asks for none).

    ``extra_args={"codemask": {"rpg": true | {RPG's fields}, "monitors": {"workspace": DIR, "file":
    PATH, "language": "python", "server": NAME, "prefix": TEXT, "suffix": TEXT, "timeout_s": S}}}``.
    Raises ValueError/TypeError naming the bad option.
    """
    if not extra_args or EXTRA_ARGS_KEY not in extra_args:
        return None
    options = extra_args[EXTRA_ARGS_KEY]
    if not isinstance(options, Mapping):
        raise TypeError(f'extra_args["{EXTRA_ARGS_KEY}"] must be an object, got {type(options).__name__}')
    unknown = set(options) - {"rpg", "monitors"}
    if unknown:
        raise ValueError(f'unknown codemask options {sorted(unknown)} (known: "rpg", "monitors")')
    return RequestOptions(rpg=_rpg(options.get("rpg")), monitors=_monitor_options(options.get("monitors")))


def _rpg(value: Any) -> RPG | None:
    if value is None or value is False:
        return None
    if value is True:
        return RPG()
    if not isinstance(value, Mapping):
        raise TypeError(f'codemask option "rpg" is true or an object of RPG fields, got {value!r}')
    return RPG(**value)


def _monitor_options(value: Any) -> MonitorOptions | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or "workspace" not in value or "file" not in value:
        raise ValueError('codemask option "monitors" is an object with at least "workspace" and "file"')
    options = MonitorOptions(**value)
    from codemask.monitors.spec import language_spec

    language_spec(options.language)  # an unknown language fails here, not in the engine
    return options


@dataclass
class _RequestState:
    """One request's RPG state and monitors, fed its output tokens as they appear."""

    output_ids: list[int]
    repetition: RepetitionState | None
    monitors: MonitorSet | None
    prompt_text: str
    generated: bytearray = field(default_factory=bytearray)
    consumed: int = 0
    usage: MonitorStats = field(default_factory=MonitorStats)

    def sync(self, token_bytes: list[bytes]) -> None:
        """Take in the output tokens sampled since the last step (up to a not-yet-known placeholder)."""
        new: list[int] = []
        for token in self.output_ids[self.consumed:]:
            if token < 0:
                break
            new.append(token)
        if not new:
            return
        self.consumed += len(new)
        if self.repetition is not None:
            self.repetition.append(new)
        self.generated += b"".join(token_bytes[t] if t < len(token_bytes) else b"" for t in new)


class CodemaskLogitsProcessor(LogitsProcessor):
    """RPG's repetition decay and language-server monitors, per request, in vLLM's sampler.

    Requests opt in through ``SamplingParams.extra_args["codemask"]`` (:func:`request_options`); the
    others cost nothing. The monitors' masks are ANDed into the row (a row they would empty keeps
    its mask), then RPG decays the row's repeats, on the grammar-masked logits vLLM hands the
    sampler. Changes the argmax, so vLLM applies it before greedy sampling.
    """

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.vllm_config = vllm_config
        self.device = device
        self._states: dict[int, _RequestState] = {}
        self._vocab: ByteVocabulary | None = None
        self._stop_ids: list[int] = []

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        request_options(sampling_params.extra_args)

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        process_dict_updates(self._states, batch_update, self._new_state)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self._states:
            return logits
        vocab = self._vocabulary()
        rows, masks = [], []
        penalties = [Penalties() for _ in range(logits.shape[0])]
        for row, state in self._states.items():
            state.sync(vocab.token_bytes)
            if state.monitors is not None:
                mask = state.monitors.mask(state.prompt_text, decode_text(bytes(state.generated)), state.usage)
                if mask is not None:
                    rows.append(row)
                    masks.append(mask)
            if state.repetition is not None:
                penalties[row] = state.repetition.penalties()
        if rows:
            apply_unless_empty(logits, rows, masks, logits.shape[-1])
        _apply_rpg(logits, penalties, self._states, self._stop_ids)
        return logits

    def _new_state(self, params: Any, prompt_ids: list[int] | None, output_ids: list[int]) -> _RequestState | None:
        options = request_options(params.extra_args)
        if options is None or (options.rpg is None and options.monitors is None):
            return None
        vocab = self._vocabulary()
        prompt = list(prompt_ids or [])
        repetition = None if options.rpg is None else RepetitionState(options.rpg, vocab.token_bytes, prompt)
        prompt_text = decode_text(b"".join(vocab.token_bytes[t] for t in prompt if 0 <= t < vocab.vocab_size))
        monitors = None
        if options.monitors is not None:
            m = options.monitors
            prompt_text = m.prefix if m.prefix is not None else prompt_text
            found = for_workspace(m.workspace, m.file, m.language, server=m.server, prefix=m.prefix,
                                  suffix=m.suffix, timeout_s=m.timeout_s)
            monitors = MonitorSet(found, vocab, self.vllm_config.model_config.get_vocab_size())
        return _RequestState(output_ids, repetition, monitors, prompt_text)

    def _vocabulary(self) -> ByteVocabulary:
        """The model's vocabulary, read from its tokenizer when a request first needs it."""
        if self._vocab is None:
            from vllm.tokenizers import cached_tokenizer_from_config

            model_config = self.vllm_config.model_config
            tokenizer = cached_tokenizer_from_config(model_config=model_config)
            vocab = compiler_for(tokenizer, model_config.get_vocab_size()).vocab
            self._stop_ids = ordered_stop_token_ids(vocab.stop_token_ids,
                                                    eos_token_id=getattr(tokenizer, "eos_token_id", None))
            self._vocab = vocab
        return self._vocab


def _apply_rpg(logits: torch.Tensor, penalties: list[Penalties], states: Mapping[int, _RequestState],
               stop_ids: list[int]) -> None:
    """Each request's decays with its own RPG settings (requests sharing settings in one pass)."""
    groups: dict[RPG, list[int]] = {}
    for row, state in states.items():
        if state.repetition is not None:
            groups.setdefault(state.repetition.rpg, []).append(row)
    for rpg, rows in groups.items():
        chosen = set(rows)
        apply_penalties_(logits, [p if r in chosen else Penalties() for r, p in enumerate(penalties)], rpg, stop_ids)

