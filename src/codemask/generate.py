"""`constrained_generate`: codemask's own decoding loop, with a KV cache, batched, on the model's device.

Why an own loop rather than ``model.generate``: jump-forward appends several tokens per step,
speculative verification scores K+1 positions per sequence, and AdaDec rolls candidates out from
the middle of a step — none of which a logits processor can do. The loop is plain: prefill the
left-padded prompts, then per step start the stages' CPU work, run one forward pass over the new
tokens of every row, let the pipeline mask and pick, and commit.

Rows may receive different numbers of tokens in one step (a jump-forward on one row, one token on
another). Each step's chunk is right-aligned per row and padded on the left with positions the
attention mask hides, so the cache holds a few masked holes but every row's last position is
real; position ids come from the attention mask, so the model sees each row's tokens contiguously.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import torch

from codemask.adadec import AdaDec, AdaDecSelector
from codemask.compilers import compiler_for, model_stop_token_ids, model_vocab_size, ordered_stop_token_ids
from codemask.decoding.grammar import GrammarStage
from codemask.decoding.pipeline import Pipeline, Stage, StepLayout
from codemask.decoding.sampling import SamplingParams, SamplingSelector
from codemask.engine.compiler import GrammarCompiler
from codemask.engine.matcher import GrammarMatcher
from codemask.engine.token_trie import ByteVocabulary
from codemask.grammar.grammar import Grammar
from codemask.grammar.resolve import as_grammar
from codemask.monitors.monitor import Monitor
from codemask.monitors.stage import MonitorStage
from codemask.repetition import RPG, RepetitionStage
from codemask.speculative import Drafter, SpeculativeRunner, resolve_drafter

FinishReason = Literal["stop", "grammar_end", "length"]
TokenCallback = Callable[[int, list[int], str], None]
"""``on_token(row, token_ids, text)``: the tokens appended to a row this step and the text they complete."""


@dataclass
class GenerationStats:
    """What one row's generation cost.

    ``steps`` counts tokens chosen by the model; ``forced_tokens`` counts tokens appended without a
    step of their own (jump-forward); ``forward_passes`` counts model calls while the row was
    unfinished (prefill included); ``mask_time_s`` is CPU time spent computing this row's masks;
    ``repetition_time_s`` the CPU time RPG's analysis of this row took (0 without ``repetition=``);
    with ``uncertainty=AdaDec()``, ``pauses`` counts the steps whose entropy reached τ,
    ``lookahead_tokens`` the tokens its rollouts fed the model and ``lookahead_time_s`` their wall time;
    with ``speculative=``, ``drafted_tokens`` counts the tokens sent for verification and
    ``accepted_tokens`` those of them that are in the output (a verification pass is a forward pass);
    with ``monitors=``, ``monitor_steps`` counts the steps a monitor triggered at, ``monitor_queries``
    the language-server requests, ``monitor_timeouts`` those that got no answer in time (the step
    went unconstrained), ``monitor_time_s`` the monitors' wall time (overlapped with the forward
    pass) and ``monitor_wait_s`` how long decoding waited for them.
    """

    prompt_tokens: int
    steps: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    forced_tokens: int = 0
    mask_time_s: float = 0.0
    repetition_time_s: float = 0.0
    pauses: int = 0
    lookahead_tokens: int = 0
    lookahead_time_s: float = 0.0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    monitor_steps: int = 0
    monitor_queries: int = 0
    monitor_timeouts: int = 0
    monitor_time_s: float = 0.0
    monitor_wait_s: float = 0.0
    wall_time_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0


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


@dataclass
class _Row:
    prompt_ids: list[int]
    matcher: GrammarMatcher | None
    stats: GenerationStats
    token_ids: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    finish_reason: FinishReason | None = None
    stop_at: int | None = None
    stream: Any = field(default_factory=lambda: codecs.getincrementaldecoder("utf-8")(errors="replace"))


@overload
def constrained_generate(model: Any, tokenizer: Any, prompt: str | list[dict[str, Any]], grammar: Any = None, *,
                         max_new_tokens: int = 256,
                         temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                         stop: str | Sequence[str] | None = None, seed: int | None = None,
                         on_token: TokenCallback | None = None, jump_forward: bool = True,
                         compiler: GrammarCompiler | None = None,
                         repetition: RPG | None = None,
                         uncertainty: AdaDec | None = None,
                         speculative: str | Drafter | None = None,
                         monitors: Sequence[Monitor] | None = None) -> GenerationResult: ...


@overload
def constrained_generate(model: Any, tokenizer: Any, prompt: Sequence[str | list[dict[str, Any]]],
                         grammar: Any = None, *,
                         max_new_tokens: int = 256, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                         stop: str | Sequence[str] | None = None, seed: int | None = None,
                         on_token: TokenCallback | None = None, jump_forward: bool = True,
                         compiler: GrammarCompiler | None = None,
                         repetition: RPG | None = None,
                         uncertainty: AdaDec | None = None,
                         speculative: str | Drafter | None = None,
                         monitors: Sequence[Monitor] | None = None) -> list[GenerationResult]: ...


def constrained_generate(
    model: Any,
    tokenizer: Any,
    prompt: str | list[dict[str, Any]] | Sequence[str | list[dict[str, Any]]],
    grammar: Any = None,
    *,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    stop: str | Sequence[str] | None = None,
    seed: int | None = None,
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
    constraint). The output ends when the model
    picks a stop token (``finish_reason`` ``"grammar_end"`` under a grammar, which allows it only
    where the grammar may end; ``"stop"`` without one), when a ``stop`` string appears (``"stop"``,
    the text cut before it) or after ``max_new_tokens`` (``"length"``). ``temperature=0`` is greedy;
    ``seed`` makes sampling reproducible (each position's draw is made from the seed, the row and the
    position, so speculative verification writes the same tokens). ``jump_forward`` appends text
    the grammar forces without a forward pass per token. ``repetition=RPG()`` decays the tokens that
    would start another copy of a repeated span of statements or tokens (applied after the grammar
    mask, on probabilities).
    ``uncertainty=AdaDec()`` pauses where the next-token entropy reaches the model's threshold and
    reranks the top candidates by a short lookahead that the grammar and RPG constrain too.
    ``speculative="auto"`` (or a :class:`~codemask.speculative.Drafter`) drafts tokens from the grammar
    and the context and verifies them in one forward pass: the output is token for token the same,
    greedy or sampled with the same seed, with fewer forward passes (with ``uncertainty=``
    too: AdaDec pauses at the first verified position whose entropy reaches τ).
    ``monitors=codemask.monitors.for_workspace(workspace, file)`` masks names a language server says
    do not exist (members, keyword arguments, imports), ANDed with the grammar; the prompt is taken
    as the file's text before the cursor unless the monitors were given a ``prefix``. Returns one
    result, or a list for a list of prompts.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    single = isinstance(prompt, str) or is_chat(prompt)
    items: list[Any] = [prompt] if single else list(prompt)
    prompts = [render_prompt(tokenizer, p) for p in items]
    if not prompts:
        return []
    specs = _grammar_per_row(grammar, len(prompts), single)
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if any(not s for s in stops):
        raise ValueError("stop strings must be non-empty")

    compiler = compiler or compiler_for(tokenizer, model_vocab_size(model), model_stop_token_ids(model))
    vocab = compiler.vocab
    grammars = [None if spec is None else as_grammar(spec) for spec in specs]
    matchers = [None if g is None else GrammarMatcher(compiler.compile(g), **g.completion) for g in grammars]
    encoded = _encode_prompts(tokenizer, prompts, [not isinstance(p, str) for p in items])
    rows = [_Row(ids, m, GenerationStats(prompt_tokens=len(ids))) for ids, m in zip(encoded, matchers, strict=True)]
    device = next(model.parameters()).device
    penalties = [None if g is None else g.item_penalty for g in grammars]
    stage = GrammarStage(matchers, vocab.vocab_size, item_penalties=penalties)
    stages: list[Stage] = [stage]
    drafter = resolve_drafter(speculative)
    # the speculative runner and AdaDec choose outside Pipeline.process, and a top-k/top-p cut would
    # come before a deferred mask: only there does the monitor stage ask every probe up front
    defer = drafter is None and uncertainty is None and (temperature == 0 or (not top_k and top_p >= 1.0))
    monitor_stage = (MonitorStage.for_generation(monitors, vocab, prompts, defer, overlap=device.type != "cpu")
                     if monitors else None)
    if monitor_stage is not None:  # after the grammar: its -inf lands on the grammar's, an AND
        stages.append(monitor_stage)
    if repetition is not None:  # after the grammar mask: the decay acts on the allowed tokens' probabilities
        end_ids = ordered_stop_token_ids(vocab.stop_token_ids, model, getattr(tokenizer, "eos_token_id", None))
        stages.append(RepetitionStage(repetition, vocab.token_bytes, end_ids, encoded))
    sampler = SamplingSelector(SamplingParams(temperature, top_k, top_p), seed, lambda s: len(rows[s].token_ids))
    adadec = None if uncertainty is None else AdaDecSelector.for_generation(uncertainty, model, sampler, stages,
                                                                            vocab, len(rows))
    pipeline = Pipeline(stages, adadec or sampler)
    loop = _DecodingLoop(model, tokenizer, vocab, rows, pipeline, stage, device)
    if adadec is not None:
        adadec.attach(loop)  # the rollouts fork the loop's KV cache
    try:
        if drafter is None:
            loop.run(max_new_tokens, [s.encode("utf-8") for s in stops], jump_forward, on_token)
        else:
            SpeculativeRunner(loop, drafter, sampler, adadec).run(
                max_new_tokens, [s.encode("utf-8") for s in stops], jump_forward, on_token)
    finally:
        pipeline.close()
    if isinstance(stages[-1], RepetitionStage):
        for row, spent in zip(rows, stages[-1].analysis_time_s, strict=True):
            row.stats.repetition_time_s = spent
    if adadec is not None:
        adadec.record([row.stats for row in rows])
    if monitor_stage is not None:
        monitor_stage.record([row.stats for row in rows])
    results = [_result(row, g) for row, g in zip(rows, grammars, strict=True)]
    return results[0] if single else results


def _grammar_per_row(grammar: Any, count: int, single: bool) -> list[Any]:
    if not single and isinstance(grammar, list | tuple):
        if len(grammar) != count:
            raise ValueError(f"{len(grammar)} grammars for {count} prompts")
        return list(grammar)
    return [grammar] * count


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


def _encode_prompts(tokenizer: Any, prompts: list[str], templated: list[bool]) -> list[list[int]]:
    """Token ids of each prompt; a chat-templated one holds its special tokens as text already."""
    encoded = [list(tokenizer(p, add_special_tokens=not chat)["input_ids"])
               for p, chat in zip(prompts, templated, strict=True)]
    for p, ids in zip(prompts, encoded, strict=True):
        if not ids:
            raise ValueError(f"prompt {p!r} encodes to no tokens; give the model something to continue")
    return encoded


def _result(row: _Row, grammar: Grammar | None) -> GenerationResult:
    data = bytes(row.text if row.stop_at is None else row.text[: row.stop_at])
    row.stats.generated_tokens = len(row.token_ids)
    assert row.finish_reason is not None
    return GenerationResult(data.decode("utf-8", errors="replace"), row.token_ids, row.finish_reason, row.stats,
                            grammar)


def _ends_in_stop(text: bytes, before: int, stops: list[bytes]) -> bool:
    """Whether a stop string occurs in ``text`` and ends after byte ``before``."""
    return any(stop in text[max(0, before - len(stop) + 1):] for stop in stops)


class _DecodingLoop:
    """The state of one batched generation: the KV cache, its attention mask, and the rows."""

    def __init__(self, model: Any, tokenizer: Any, vocab: ByteVocabulary, rows: list[_Row], pipeline: Pipeline,
                 stage: GrammarStage, device: torch.device) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab = vocab
        self.rows = rows
        self.pipeline = pipeline
        self.stage = stage
        self.device = device
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (getattr(vocab, "eos_token_id", None) or 0)
        self.cache: Any = None
        self.attention: torch.Tensor | None = None
        self.next_logits: torch.Tensor | None = None  # handed over with a cache that holds every fed token

    def run(self, max_new_tokens: int, stops: list[bytes], jump_forward: bool, on_token: TokenCallback | None) -> None:
        started = time.perf_counter()
        feeds: list[list[int]] = [row.prompt_ids for row in self.rows]
        for index, row in enumerate(self.rows):  # a grammar that allows nothing but the end
            if self.stage.only_stop_allowed(index):
                row.finish_reason = "grammar_end"
        while True:
            active = [i for i, row in enumerate(self.rows) if row.finish_reason is None]
            if not active:
                break
            layout = StepLayout.one_row_per_sequence(active)
            self.pipeline.prepare(layout)
            if self.next_logits is not None:  # a single row whose next logits a rollout computed
                logits, self.next_logits = self.next_logits, None
            else:
                logits = self.forward(feeds)[:, -1]
                for i in active:
                    self.rows[i].stats.forward_passes += 1
            chosen = self.pipeline.process(logits[active], layout).tolist()
            feeds = [[self.pad_id] for _ in self.rows]
            for i, token in zip(active, chosen, strict=True):
                committed = self.advance(i, int(token), max_new_tokens, stops, jump_forward, on_token)
                fed = self.take_over(i, committed)
                feeds[i] = committed if fed is None else fed
                if self.rows[i].finish_reason is not None:
                    self.rows[i].stats.wall_time_s = time.perf_counter() - started
        self.record_times(started)

    def record_times(self, started: float) -> None:
        """Copy the grammar stage's mask times into the rows' stats; rows still open end now."""
        for i, row in enumerate(self.rows):
            row.stats.mask_time_s = self.stage.mask_time_s[i]
            if row.stats.wall_time_s == 0.0:
                row.stats.wall_time_s = time.perf_counter() - started

    # -- one row, one step -------------------------------------------------------------------

    def advance(self, index: int, token: int, max_new_tokens: int, stops: list[bytes], jump_forward: bool,
                 on_token: TokenCallback | None) -> list[int]:
        """Commit the chosen ``token`` (and any forced continuation); return what to feed next."""
        row = self.rows[index]
        row.stats.steps += 1
        if token in self.vocab.stop_token_ids:
            if row.matcher is not None:
                self.pipeline.commit(index, [token])
            row.finish_reason = "grammar_end" if row.matcher is not None else "stop"
            return [self.pad_id]
        budget = max_new_tokens - len(row.token_ids)
        tokens = self.jump_forward(row.matcher, token, budget) if jump_forward and row.matcher else [token]
        row.stats.forced_tokens += len(tokens) - 1
        known = self.pipeline.selector.known_continuation(index)
        if len(tokens) == 1 and known:
            tokens = self._continued(row, token, known[: budget - 1], stops, jump_forward)
            row.stats.steps += len(tokens) - 1
        self.pipeline.commit(index, tokens)
        row.token_ids.extend(tokens)
        before = len(row.text)
        new_bytes = self.bytes_of(tokens)
        row.text += new_bytes
        if on_token is not None:
            on_token(index, tokens, row.stream.decode(new_bytes))
        if self._hit_stop_string(row, before, stops):
            row.finish_reason = "stop"
        elif self.stage.only_stop_allowed(index):
            row.finish_reason = "grammar_end"
        elif len(row.token_ids) >= max_new_tokens:
            row.finish_reason = "length"
        return tokens

    def take_over(self, index: int, committed: list[int]) -> list[int] | None:
        """Install the KV cache the selector hands over after ``committed`` (AdaDec's chosen rollout
        computed it; only for a loop that decodes one sequence) and return what to feed next: the
        last committed token, or nothing when the cache holds all of them and the next position's
        logits came with it (``next_logits``). None when the selector hands nothing over."""
        if len(self.rows) != 1 or self.rows[index].finish_reason is not None:
            return None
        handed = self.pipeline.selector.continuation_cache(index, committed)
        if handed is None:
            return None
        self.cache, self.attention = handed.cache, handed.attention
        if handed.next_logits is None:
            return committed[-1:]
        self.next_logits = handed.next_logits
        return []

    def _continued(self, row: _Row, token: int, known: list[int], stops: list[bytes], jump_forward: bool) -> list[int]:
        """``token`` and the selector's ``known`` next picks, up to where plain decoding would part
        from them: a token the grammar refuses, one after which the grammar forces bytes (jump-forward
        would commit those), or the end of a stop string."""
        probe = row.matcher.fork() if row.matcher is not None else None
        if probe is not None and not probe.accept_token(token):
            return [token]
        tokens = [token]
        text = bytes(row.text) + self.vocab.token_bytes[token]
        if _ends_in_stop(text, len(row.text), stops):
            return tokens
        for nxt in known:
            if probe is not None and ((jump_forward and len(self.jump_forward(probe, nxt, 2)) > 1)
                                      or not probe.accept_token(nxt)):
                break
            tokens.append(nxt)
            before = len(text)
            text += self.vocab.token_bytes[nxt]
            if _ends_in_stop(text, before, stops):
                break
        return tokens

    @staticmethod
    def _hit_stop_string(row: _Row, before: int, stops: list[bytes]) -> bool:
        for stop in stops:
            at = row.text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0 and (row.stop_at is None or at < row.stop_at):
                row.stop_at = at
        return row.stop_at is not None

    def jump_forward(self, matcher: GrammarMatcher, token: int, budget: int) -> list[int]:
        """``token`` followed by what the grammar forces, re-tokenised the way the tokenizer would.

        The chosen token and the forced bytes are encoded together, so the boundary between them gets
        the tokens the model would have produced itself; the last of those tokens is left to the model
        (it could merge with what comes after the forced text). Anything that does not round-trip
        exactly, or that the grammar would refuse, falls back to the chosen token alone.
        """
        probe = matcher.fork()
        if not probe.accept_token(token):
            return [token]
        forced = probe.find_jump_forward_bytes()
        if not forced:
            return [token]
        text = self.vocab.token_bytes[token] + forced
        try:
            retokenised = list(self.tokenizer.encode(text.decode("utf-8"), add_special_tokens=False))
        except UnicodeDecodeError:
            return [token]
        if self.bytes_of(retokenised) != text:
            return [token]
        keep = retokenised[:-1][:budget]
        if len(self.bytes_of(keep)) <= len(self.vocab.token_bytes[token]):
            return [token]
        probe = matcher.fork()
        if not all(probe.accept_token(t) for t in keep):
            return [token]
        return keep

    def bytes_of(self, token_ids: list[int]) -> bytes:
        return b"".join(self.vocab.token_bytes[t] for t in token_ids)

    # -- the model ---------------------------------------------------------------------------

    def forward(self, feeds: list[list[int]], keep: int = 1) -> torch.Tensor:
        """Run the model on each row's new tokens (right-aligned); the last ``keep`` positions' logits
        per row, ``[rows, keep, vocab]`` (speculative verification keeps K+1)."""
        width = max(len(f) for f in feeds)
        ids = torch.full((len(feeds), width), self.pad_id, dtype=torch.long)
        real = torch.zeros((len(feeds), width), dtype=torch.long)
        for r, feed in enumerate(feeds):
            ids[r, width - len(feed):] = torch.tensor(feed, dtype=torch.long)
            if self.cache is None or self.rows[r].finish_reason is None:
                real[r, width - len(feed):] = 1
        ids, real = ids.to(self.device), real.to(self.device)
        if self.cache is None:
            from transformers import DynamicCache

            self.cache = DynamicCache(config=self.model.config)
            self.attention = real
        else:
            assert self.attention is not None
            self.attention = torch.cat([self.attention, real], dim=1)
        positions = (self.attention.cumsum(-1) - 1).clamp(min=0)[:, -width:]
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=self.attention, position_ids=positions,
                             past_key_values=self.cache, use_cache=True, logits_to_keep=keep)
        self.cache = out.past_key_values
        return out.logits[:, -keep:, :].float()
