"""CodemaskLogitsProcessor as vLLM's sampler drives it: built by build_logitsprocs, fed BatchUpdates
(added, moved, swapped, removed) and output-token lists that grow in place, applied to the batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.exceptions import VLLMValidationError
from vllm.sampling_params import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality, build_logitsprocs

from codemask.compilers import compiler_for, ordered_stop_token_ids
from codemask.integrations.vllm import CodemaskLogitsProcessor, request_options
from codemask.monitors import for_workspace, shutdown_all
from codemask.monitors.stage import MonitorSet, MonitorStats
from codemask.repetition.config import RPG
from codemask.repetition.stage import apply_penalties_
from codemask.repetition.state import RepetitionState
from tests.integrations.conftest import Engine, logits_like
from tests.monitors.conftest import write_project

COPY = "x = 1\ny = 2\n"


def processor(engine: Engine) -> CodemaskLogitsProcessor:
    built = build_logitsprocs(engine.config, torch.device("cpu"), False, False)
    return next(p for p in built.all if isinstance(p, CodemaskLogitsProcessor))


def add(*requests: tuple[int, SamplingParams, list[int], list[int]], size: int) -> BatchUpdate:
    return BatchUpdate(batch_size=size, removed=[], added=list(requests), moved=[])


def expected_rpg(engine: Engine, logits: torch.Tensor, row: int, rpg: RPG, prompt: list[int],
                 outputs: list[int]) -> torch.Tensor:
    """RPG applied to one row by codemask's own state (the prompt, then the generated tokens) and stage."""
    vocab = compiler_for(engine.tokenizer, engine.vocab_size).vocab
    stops = ordered_stop_token_ids(vocab.stop_token_ids, eos_token_id=engine.tokenizer.eos_token_id)
    out = logits.clone()
    state = RepetitionState(rpg, vocab.token_bytes, prompt)
    state.append(outputs)
    penalties = state.penalties()
    assert penalties, "the test text must repeat itself"
    single = out[row:row + 1]
    apply_penalties_(single, [penalties], rpg, stops)
    return out


def test_rpg_decays_a_repeating_request_and_leaves_the_others_alone(engine: Engine) -> None:
    lp = processor(engine)
    prompt = engine.tokenizer.encode(COPY)
    rest = engine.tokenizer.encode(COPY * 2, add_special_tokens=False)  # the model repeats the prompt
    outputs: list[int] = []
    plain = SamplingParams(max_tokens=8)
    asked = SamplingParams(max_tokens=8, extra_args={"codemask": {"rpg": {"penalty": 0.8}}})
    lp.update_state(add((0, plain, [1, 2], []), (1, asked, prompt, outputs), size=2))
    outputs.extend(rest)  # the engine appends sampled tokens to the same list
    lp.update_state(None)
    logits = logits_like(engine, 2)
    want = expected_rpg(engine, logits, 1, RPG(penalty=0.8), prompt, rest)
    got = lp.apply(logits.clone())
    assert torch.equal(got[0], logits[0])
    assert torch.equal(got[1], want[1])
    assert not torch.equal(got[1], logits[1])

    # vLLM compacts the batch: the request moves to row 0, then a request is swapped in front of it
    lp.update_state(BatchUpdate(batch_size=1, removed=[0], added=[], moved=[(1, 0, MoveDirectionality.UNIDIRECTIONAL)]))
    logits = logits_like(engine, 1, seed=1)
    assert torch.equal(lp.apply(logits.clone())[0], expected_rpg(engine, logits, 0, RPG(penalty=0.8), prompt, rest)[0])
    lp.update_state(BatchUpdate(batch_size=2, removed=[], added=[(1, plain, [3], [])],
                                moved=[(0, 1, MoveDirectionality.SWAP)]))
    logits = logits_like(engine, 2, seed=2)
    got = lp.apply(logits.clone())
    assert torch.equal(got[0], logits[0])
    assert torch.equal(got[1], expected_rpg(engine, logits, 1, RPG(penalty=0.8), prompt, rest)[1])
    lp.update_state(BatchUpdate(batch_size=1, removed=[1], added=[], moved=[]))
    logits = logits_like(engine, 1, seed=3)
    assert torch.equal(lp.apply(logits.clone()), logits)


@pytest.mark.slow
def test_monitors_mask_a_request_that_names_a_workspace(engine: Engine, tmp_path: Path) -> None:
    project = write_project(tmp_path)
    prefix = (project / "main.py").read_text(encoding="utf-8") + "inv."
    options = {"workspace": str(project), "file": "main.py", "prefix": prefix, "timeout_s": 30}
    lp = processor(engine)
    params = SamplingParams(max_tokens=8, extra_args={"codemask": {"monitors": options}})
    try:
        lp.update_state(add((0, params, [1, 2, 3], []), size=1))
        vocab = compiler_for(engine.tokenizer, engine.vocab_size).vocab
        monitors = MonitorSet(for_workspace(project, "main.py", prefix=prefix, timeout_s=30), vocab, engine.vocab_size)
        mask = monitors.mask(prefix, "", MonitorStats())
        assert mask is not None
        logits = logits_like(engine, 1)
        got = lp.apply(logits.clone())[0]
        allowed = torch.from_numpy(mask[: engine.vocab_size])
        assert torch.equal(got[allowed], logits[0][allowed])
        assert torch.isinf(got[~allowed]).all()
        restock = engine.tokenizer.encode("restock", add_special_tokens=False)[0]
        assert bool(allowed[restock]) and not bool(allowed[engine.tokenizer.encode("zzz", add_special_tokens=False)[0]])
    finally:
        shutdown_all()


@pytest.mark.parametrize(("extra", "error"), [
    ({"codemask": "rpg"}, TypeError),
    ({"codemask": {"rpq": True}}, ValueError),
    ({"codemask": {"rpg": {"penalty": 2.0}}}, ValueError),
    ({"codemask": {"monitors": {"workspace": "/tmp"}}}, ValueError),
    ({"codemask": {"monitors": {"workspace": "/tmp", "file": "a.cob", "language": "cobol"}}}, ValueError),
])
def test_bad_options_are_refused_by_validate_params(extra: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        request_options(extra)
    with pytest.raises((VLLMValidationError, ValueError, TypeError)):
        CodemaskLogitsProcessor.validate_params(SamplingParams(extra_args=extra))


def test_requests_without_codemask_options_cost_nothing(engine: Engine) -> None:
    lp = processor(engine)
    lp.update_state(add((0, SamplingParams(extra_args={"other": 1}), [1], []), size=1))
    logits = logits_like(engine, 1)
    assert lp.apply(logits) is logits
    assert request_options({"other": 1}) is None
