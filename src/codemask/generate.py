"""`constrained_generate`: one call that decodes prompts under grammars, on the model's device.

A thin function over :class:`~codemask.decoding.loop.DecodingLoop`: it renders the prompts (chat
messages through the tokenizer's template), compiles the grammars, assembles the stages the call
asks for (grammar masks, monitors, RPG) and the selector (greedy or seeded sampling, AdaDec around
it), admits one row per prompt and steps the loop — speculatively with a drafter — until every row
has finished.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from codemask.adadec import AdaDec, AdaDecSelector
from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size, ordered_stop_token_ids
from codemask.decoding.grammar import GrammarStage
from codemask.decoding.loop import DecodingLoop
from codemask.decoding.pipeline import Pipeline, Stage
from codemask.decoding.row import FinishReason, Row, RowOptions, TokenCallback
from codemask.decoding.sampling import SamplingParams, SamplingSelector
from codemask.decoding.stats import GenerationStats
from codemask.engine.compiler import GrammarCompiler
from codemask.engine.matcher import GrammarMatcher
from codemask.grammar.grammar import Grammar
from codemask.grammar.resolve import as_grammar
from codemask.monitors.monitor import Monitor
from codemask.monitors.stage import MonitorStage
from codemask.repetition import RPG, RepetitionStage
from codemask.speculative import Drafter, SpeculativeRunner, resolve_drafter

Messages = list[dict[str, Any]]
Prompt = str | Messages


@dataclass(frozen=True)
class Sampling:
    """How tokens are picked: ``temperature`` 0 is greedy; otherwise sampled after ``top_k`` and
    ``top_p``, reproducibly with a ``seed`` (each position's draw is keyed by the seed, the row and the
    position, so speculative verification writes the same tokens)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def params(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)


@dataclass
class GenerationResult:
    """One row's output: ``text`` (stop string and stop token excluded), its ``token_ids``, why it ended.

    Under a JSON grammar (a JSON Schema, a pydantic class, the builtin ``"json"``), ``json`` is the
    value the text spells and ``parsed`` that value, or an instance of the pydantic class.
    """

    text: str
    token_ids: list[int]
    finish_reason: FinishReason
    stats: GenerationStats
    grammar: Grammar | None = field(default=None, repr=False)

    @property
    def json(self) -> Any:
        """The JSON value of ``text``; a ValueError says why when the text is not one (cut by the
        token limit or a stop string, or generated without a JSON grammar)."""
        try:
            return json.loads(self.text)
        except json.JSONDecodeError as exc:
            cut = f" (generation ended by {self.finish_reason!r})" if self.finish_reason != "grammar_end" else ""
            raise ValueError(f"the output is not a JSON document{cut}: {exc}") from None

    @property
    def parsed(self) -> Any:
        """An instance of the pydantic class the grammar came from, or the JSON value under any other
        JSON grammar; None for grammars that do not write JSON."""
        if self.grammar is None or self.grammar.output != "json":
            return None
        if self.grammar.output_model is not None:
            return self.grammar.output_model.model_validate_json(self.text)
        return self.json

    @classmethod
    def of(cls, row: Row, grammar: Grammar | None) -> GenerationResult:
        assert row.finish_reason is not None
        return cls(row.output.decode("utf-8", errors="replace"), row.token_ids, row.finish_reason, row.stats, grammar)


@overload
def constrained_generate(model: Any, tokenizer: Any, prompt: Prompt, grammar: Any = None, *,
                         max_new_tokens: int = 256, sampling: Sampling | None = None,
                         stop: str | Sequence[str] | None = None, on_token: TokenCallback | None = None,
                         jump_forward: bool = True, compiler: GrammarCompiler | None = None,
                         repetition: RPG | None = None, uncertainty: AdaDec | None = None,
                         speculative: str | Drafter | None = None,
                         monitors: Sequence[Monitor] | None = None) -> GenerationResult: ...


@overload
def constrained_generate(model: Any, tokenizer: Any, prompt: Sequence[Prompt], grammar: Any = None, *,
                         max_new_tokens: int = 256, sampling: Sampling | None = None,
                         stop: str | Sequence[str] | None = None, on_token: TokenCallback | None = None,
                         jump_forward: bool = True, compiler: GrammarCompiler | None = None,
                         repetition: RPG | None = None, uncertainty: AdaDec | None = None,
                         speculative: str | Drafter | None = None,
                         monitors: Sequence[Monitor] | None = None) -> list[GenerationResult]: ...


def constrained_generate(
    model: Any,
    tokenizer: Any,
    prompt: Prompt | Sequence[Prompt],
    grammar: Any = None,
    *,
    max_new_tokens: int = 256,
    sampling: Sampling | None = None,
    stop: str | Sequence[str] | None = None,
    on_token: TokenCallback | None = None,
    jump_forward: bool = True,
    compiler: GrammarCompiler | None = None,
    repetition: RPG | None = None,
    uncertainty: AdaDec | None = None,
    speculative: str | Drafter | None = None,
    monitors: Sequence[Monitor] | None = None,
) -> GenerationResult | list[GenerationResult]:
    """Generate from ``prompt`` so that the output matches ``grammar``.

    ``prompt`` is a string, chat messages (``[{"role": "user", "content": ...}]``, rendered with the
    tokenizer's chat template and the assistant's turn opened), or a list of either for a batch.
    ``grammar`` is a Grammar, a builtin name, a grammar file, EBNF text, a JSON Schema dict, a pydantic
    model class or None (unconstrained); for a batch, a list gives each row its own (None for no
    constraint). The output ends when the model picks a stop token (``finish_reason``
    ``"grammar_end"`` under a grammar, which allows it only where the grammar may end; ``"stop"``
    without one), when a ``stop`` string appears (``"stop"``, the text cut before it) or after
    ``max_new_tokens`` (``"length"``). ``sampling`` (:class:`Sampling`) is greedy by default.
    ``jump_forward`` appends text the grammar forces without a forward pass per token;
    ``on_token(row, token_ids, text)`` streams each row's new text.
    ``repetition=RPG()`` decays the tokens that would start another copy of a repeated span of
    statements or tokens (after the grammar mask, on probabilities).
    ``uncertainty=AdaDec()`` pauses where the next-token entropy reaches the model's threshold and
    reranks the top candidates by a short lookahead that the grammar and RPG constrain too.
    ``speculative="auto"`` (or a :class:`~codemask.speculative.Drafter`) drafts tokens from the grammar
    and the context and verifies them in one forward pass: the output is token for token the same,
    greedy or sampled with the same seed, with fewer forward passes.
    ``monitors=codemask.monitors.for_workspace(workspace, file)`` masks names a language server says
    do not exist (members, keyword arguments, imports), ANDed with the grammar; the prompt is taken
    as the file's text before the cursor unless the monitors were given a ``prefix``. Returns one
    result, or a list for a list of prompts.
    """
    sampling = sampling or Sampling()
    single = isinstance(prompt, str) or is_chat(prompt)
    items: list[Any] = [prompt] if single else list(prompt)
    texts = [render_prompt(tokenizer, p) for p in items]
    stops = [s.encode("utf-8") for s in ([stop] if isinstance(stop, str) else list(stop or []))]
    options = RowOptions(max_new_tokens, stops, jump_forward, on_token)
    if not items:
        return []
    compiler = compiler or compiler_of(model, tokenizer)
    grammars = [None if spec is None else as_grammar(spec) for spec in _grammar_per_row(grammar, len(items), single)]
    encoded = _encode_prompts(tokenizer, texts, [not isinstance(p, str) for p in items])
    rows = [Row(ids, None if g is None else GrammarMatcher(compiler.compile(g), **g.completion), options,
                item_penalty=None if g is None else g.item_penalty, extra={"prompt_text": text})
            for ids, g, text in zip(encoded, grammars, texts, strict=True)]
    drafter = resolve_drafter(speculative)
    loop, sampler, adadec = _build_loop(model, tokenizer, compiler, sampling, repetition, uncertainty, monitors,
                                        defer=drafter is None and uncertainty is None and not _cuts(sampling))
    try:
        loop.admit(rows)
        if drafter is None:
            loop.run()
        else:
            SpeculativeRunner(loop, drafter, sampler, adadec).run()
    finally:
        loop.pipeline.close()
    results = [GenerationResult.of(row, g) for row, g in zip(rows, grammars, strict=True)]
    return results[0] if single else results


def decoding_loop(model: Any, tokenizer: Any, *, compiler: GrammarCompiler | None = None,
                  sampling: Sampling | None = None, repetition: RPG | None = None) -> DecodingLoop:
    """A loop to admit sequences into while it runs (continuous batching; :func:`new_row` makes them):
    grammar masks per row, RPG where a row does not set ``extra["repetition"] = False``, and the
    ``sampling`` of rows that bring none of their own (``extra["sampling"]``)."""
    compiler = compiler or compiler_of(model, tokenizer)
    loop, _, _ = _build_loop(model, tokenizer, compiler, sampling or Sampling(), repetition, None, None, defer=False)
    return loop


def compiler_of(model: Any, tokenizer: Any) -> GrammarCompiler:
    """The shared compiler for ``model``'s logits (their width, its stop tokens) and ``tokenizer``."""
    return compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))


def new_row(tokenizer: Any, compiler: GrammarCompiler, prompt: Prompt, grammar: Any = None,
            options: RowOptions | None = None, **extra: Any) -> Row:
    """A row for a loop: the prompt (text or chat messages) encoded, the grammar compiled with
    ``compiler`` (:func:`compiler_of` the loop's model), its JSON repeated-item decay, and ``extra``
    settings for the stages (``repetition``, ``sampling``, ``prompt_text``...)."""
    text = render_prompt(tokenizer, prompt)
    (ids,) = _encode_prompts(tokenizer, [text], [not isinstance(prompt, str)])
    resolved = None if grammar is None else as_grammar(grammar)
    matcher = None if resolved is None else GrammarMatcher(compiler.compile(resolved), **resolved.completion)
    return Row(ids, matcher, options or RowOptions(), item_penalty=None if resolved is None else resolved.item_penalty,
               extra={"prompt_text": text, "grammar": resolved, **extra})


def _build_loop(model: Any, tokenizer: Any, compiler: GrammarCompiler, sampling: Sampling, repetition: RPG | None,
                uncertainty: AdaDec | None, monitors: Sequence[Monitor] | None,
                defer: bool) -> tuple[DecodingLoop, SamplingSelector, AdaDecSelector | None]:
    """The loop and its pipeline for one call: grammar masks, then monitors (their -inf lands on the
    grammar's: an AND), then RPG (its decay acts on the allowed tokens' probabilities)."""
    vocab = compiler.vocab
    device = next(model.parameters()).device
    stage = GrammarStage([], vocab.vocab_size)
    stages: list[Stage] = [stage]
    if monitors:  # the speculative runner and AdaDec choose outside Pipeline.process: defer only without them
        stages.append(MonitorStage.for_generation(monitors, vocab, [], defer, overlap=device.type != "cpu"))
    if repetition is not None:
        end_ids = ordered_stop_token_ids(vocab.stop_token_ids, model, getattr(tokenizer, "eos_token_id", None))
        stages.append(RepetitionStage(repetition, vocab.token_bytes, end_ids))
    sampler = SamplingSelector(sampling.params, sampling.seed)
    adadec = None if uncertainty is None else AdaDecSelector.for_generation(uncertainty, model, sampler, stages, vocab)
    loop = DecodingLoop(model, tokenizer, vocab, Pipeline(stages, adadec or sampler), stage, device)
    if adadec is not None:
        adadec.attach(loop)  # the rollouts fork the loop's KV cache
    return loop, sampler, adadec


def _cuts(sampling: Sampling) -> bool:
    """Whether sampling cuts the distribution (top-k/top-p) before a deferred mask would come."""
    return sampling.temperature != 0 and (bool(sampling.top_k) or sampling.top_p < 1.0)


def is_chat(prompt: Any) -> bool:
    """Whether ``prompt`` is one conversation: a list of ``{"role": ..., "content": ...}`` messages."""
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(isinstance(m, dict) for m in prompt)


def render_prompt(tokenizer: Any, prompt: Any) -> str:
    """A prompt as text: a string as it is, chat messages through the tokenizer's chat template
    with the assistant's turn opened (``add_generation_prompt``)."""
    if isinstance(prompt, str):
        return prompt
    if not is_chat(prompt):
        raise TypeError("a prompt is a string or a list of chat messages ({'role': ..., 'content': ...}), "
                        f"not {type(prompt).__name__}: {prompt!r:.80}")
    for message in prompt:
        if not isinstance(message.get("role"), str) or "content" not in message:
            raise ValueError(f"a chat message needs a 'role' and a 'content', got {message!r:.80}")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("this tokenizer has no chat template: pass the prompt as text")
    return str(tokenizer.apply_chat_template(list(prompt), add_generation_prompt=True, tokenize=False))


def _grammar_per_row(grammar: Any, count: int, single: bool) -> list[Any]:
    if not single and isinstance(grammar, list | tuple):
        if len(grammar) != count:
            raise ValueError(f"{len(grammar)} grammars for {count} prompts")
        return list(grammar)
    return [grammar] * count


def _encode_prompts(tokenizer: Any, prompts: list[str], templated: list[bool]) -> list[list[int]]:
    """Token ids of each prompt; a chat-templated one holds its special tokens as text already."""
    encoded = [list(tokenizer(p, add_special_tokens=not chat)["input_ids"])
               for p, chat in zip(prompts, templated, strict=True)]
    for p, ids in zip(prompts, encoded, strict=True):
        if not ids:
            raise ValueError(f"prompt {p!r} encodes to no tokens; give the model something to continue")
    return encoded
