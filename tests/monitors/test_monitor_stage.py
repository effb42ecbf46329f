"""The monitor stage: a row is masked unless the AND would leave it no token; a step's accounting."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from codemask.assets import load_tokenizer
from codemask.monitors import for_workspace, stage
from codemask.monitors.stage import MonitorSet, MonitorStats, apply_unless_empty
from codemask.vocab import Vocabulary
from tests.monitors.conftest import require_server


def _case(dtype: torch.dtype) -> tuple[torch.Tensor, list[int], list[np.ndarray], int]:
    """Four rows over 100 logits of which 90 are tokens (10 padded outputs): row 0 masked normally,
    row 1 untouched, row 2 whose allowed tokens the grammar already forbade (left alone), row 3
    whose only allowed token is the one the grammar left."""
    rng = np.random.default_rng(7)
    logits = torch.from_numpy(rng.standard_normal((4, 100)).astype(np.float32)).to(dtype)
    logits[2, :50] = float("-inf")
    logits[3, :] = float("-inf")
    logits[3, 42] = 1.0
    logits[3, 43] = 2.0
    allowed_0 = rng.random(90) < 0.3
    allowed_2 = np.zeros(90, dtype=bool)
    allowed_2[:50] = True
    allowed_3 = np.zeros(90, dtype=bool)
    allowed_3[[5, 42]] = True
    return logits, [0, 2, 3], [allowed_0, allowed_2, allowed_3], 90


def _expected(logits: torch.Tensor, rows: list[int], masks: list[np.ndarray], width: int) -> torch.Tensor:
    out = logits.clone().float()
    for r, allowed in zip(rows, masks, strict=True):
        candidate = out[r].clone()
        candidate[:width][~torch.from_numpy(allowed)] = float("-inf")
        candidate[width:] = float("-inf")
        if torch.isfinite(candidate).any():
            out[r] = candidate
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_rows_masked_unless_left_empty(dtype: torch.dtype) -> None:
    """float32/float16 take the numpy path, bfloat16 the packed-bitmask path used on accelerators."""
    logits, rows, masks, width = _case(dtype)
    expected = _expected(logits, rows, masks, width)
    apply_unless_empty(logits, rows, masks, width)
    assert torch.equal(logits.float(), expected)
    assert torch.isfinite(logits[1]).all()  # a row without a mask is untouched
    assert torch.isfinite(logits[2, 50:90]).all() and torch.isinf(logits[2, :50]).all()  # left alone
    assert torch.nonzero(torch.isfinite(logits[3])).flatten().tolist() == [42]
    assert torch.isinf(logits[0, 90:]).all()  # padded outputs are never tokens


def test_numpy_and_packed_paths_agree_on_a_real_vocabulary_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Qwen2.5's widths: 151,936 logits for 151,665 tokens; the packed path forced on float32."""
    rng = np.random.default_rng(3)
    logits = torch.from_numpy(rng.standard_normal((3, 151936)).astype(np.float32))
    logits[2, :-300] = float("-inf")
    masks = [rng.random(151665) < 0.5, np.zeros(151665, dtype=bool), np.zeros(151665, dtype=bool)]
    masks[1][151664] = True
    masks[2][:1000] = True
    numpy_path = logits.clone()
    apply_unless_empty(numpy_path, [0, 1, 2], masks, 151665)
    monkeypatch.setattr(stage, "_NUMPY_FLOATS", ())
    packed_path = logits.clone()
    apply_unless_empty(packed_path, [0, 1, 2], masks, 151665)
    assert torch.equal(numpy_path, packed_path)
    assert torch.isfinite(numpy_path[1]).sum() == 1 and torch.equal(numpy_path[2], logits[2])


def test_a_mask_that_is_not_bool_is_refused() -> None:
    """A uint8 mask would turn ``~allowed`` into 254/255 and forbid every token: refused instead."""
    logits = torch.zeros(1, 8)
    with pytest.raises(ValueError, match="bool"):
        apply_unless_empty(logits, [0], [np.ones(8, dtype=np.uint8)], 8)


def test_a_deferred_mask_resolved_from_the_cache_counts_its_step(monitors: list, main_prefix: str) -> None:
    """A probe whose answer is cached (the member list at ``inv.`` was asked before) resolves with no
    request, and its step still counts as monitored — once, however often it is resolved."""
    monitor_set = MonitorSet(monitors, Vocabulary.from_tokenizer(load_tokenizer("smollm2")))
    member = next(m for m in monitors if type(m).__name__ == "MemberAccessMonitor")
    assert member.ask("textDocument/completion", main_prefix + "inv.", "", member._parse) is not None
    usage = MonitorStats()
    step = monitor_set.step_masks(main_prefix + "inv", "", usage)
    assert step.mask is None and len(step.deferred) == 1 and usage.steps == 0
    mask = step.deferred[0].resolve()
    assert mask is not None and mask.any() and not mask.all()
    step.deferred[0].resolve()
    assert (usage.steps, usage.queries, usage.timeouts) == (1, 0, 0)



def _stage_logits(monitors: list, vocab: Vocabulary, text: str, favourite: int) -> torch.Tensor:
    """One step of the real monitor stage after ``text``, on logits whose highest is ``favourite``."""
    from codemask.decoding.pipeline import StepLayout
    from codemask.monitors.stage import MonitorStage

    monitor_stage = MonitorStage.for_generation(monitors, vocab, [text], overlap=False)
    logits = torch.zeros((1, vocab.vocab_size))
    logits[0, favourite] = 10.0
    layout = StepLayout.one_row_per_sequence([0])
    monitor_stage.prepare(layout)
    monitor_stage.apply(logits, layout)
    monitor_stage.close()
    return logits[0]


@pytest.mark.parametrize("server", ["pyrefly", "jedi"])
def test_no_end_of_sequence_until_the_member_name_is_complete(project: Path, main_prefix: str, server: str) -> None:
    """Guards the held-out finding: Qwen2.5-Coder with pyrefly wrote ``ok = ledger.opening_`` and
    then end-of-sequence, and after ``found = wh.`` end-of-sequence at once (an empty completion):
    the monitor had masked the model's choice but left EOS open. With EOS the model's favourite,
    the real stage over a real server forbids it after ``x = inv.`` and after the partial
    ``x = inv.restock_`` (the best token left then goes on with a member), and lets it be once the
    name is whole (``x = inv.total_quantity``)."""
    require_server("python", server)
    vocab = Vocabulary.from_tokenizer(load_tokenizer("qwen3"))
    eos = min(vocab.stop_token_ids)
    monitors = for_workspace(project, "main.py", server=server)
    members = ("restock_shelf", "total_quantity", "capacity", "shelves")
    for typed in ("", "restock_"):
        logits = _stage_logits(monitors, vocab, main_prefix + "x = inv." + typed, eos)
        assert logits[eos] == float("-inf"), typed
        written = typed + bytes(vocab.token_bytes[int(logits.argmax())]).decode()
        assert any(written.startswith(n) or n.startswith(written) for n in members) or written.startswith("_"), \
            written
    assert _stage_logits(monitors, vocab, main_prefix + "x = inv.total_quantity", eos)[eos] == 10.0
