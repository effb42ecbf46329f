"""Monitors in generation with SmolLM2: names exist, a killed or stalled server never hangs decoding."""

from __future__ import annotations

import ast
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from codemask import constrained_generate
from codemask.hf import monitor_logits_processor
from codemask.monitors import for_workspace
from codemask.monitors.stage import MonitorStage

pytestmark = pytest.mark.slow

INVENTORY_MEMBERS = {"capacity", "shelves", "restock_shelf", "total_quantity"}


def member_name(text: str) -> str:
    match = re.match(r"\w+", text)
    assert match, text
    return match.group()


def test_generated_member_exists(smollm2: tuple[Any, Any], project: Path, main_prefix: str) -> None:
    model, tokenizer = smollm2
    prompt = main_prefix + "inv."
    plain = constrained_generate(model, tokenizer, prompt, max_new_tokens=6)
    guided = constrained_generate(model, tokenizer, prompt, max_new_tokens=6,
                                  monitors=for_workspace(project, "main.py"))
    name = member_name(guided.text)
    assert name in INVENTORY_MEMBERS or (name.startswith("__") and name.endswith("__")), guided.text
    assert guided.stats.monitors.queries >= 1 and guided.stats.monitors.timeouts == 0
    assert guided.stats.monitors.steps >= 1
    assert member_name(plain.text) not in INVENTORY_MEMBERS  # SmolLM2 guesses a name the class lacks


def test_hf_processor_masks_generate(smollm2: tuple[Any, Any], project: Path, main_prefix: str) -> None:
    model, tokenizer = smollm2
    processor = monitor_logits_processor(tokenizer, for_workspace(project, "main.py"), model)
    inputs = tokenizer(main_prefix + "inv.", return_tensors="pt")
    out = model.generate(**inputs, logits_processor=[processor], max_new_tokens=6, do_sample=False)
    text = tokenizer.decode(out[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    assert member_name(text) in INVENTORY_MEMBERS
    assert processor.usage.queries >= 1


def test_killed_server_mid_generation(smollm2: tuple[Any, Any], own_project: Path) -> None:
    model, tokenizer = smollm2
    monitors = for_workspace(own_project, "main.py", timeout_s=5.0)
    server = monitors[0].file.server
    killed: list[int] = []

    def kill_after_first_token(row: int, token_ids: list[int], text: str) -> None:
        if not killed and server.pid is not None:
            killed.append(server.pid)
            os.kill(server.pid, signal.SIGKILL)

    prompt = (own_project / "main.py").read_text() + "inv."
    out = constrained_generate(model, tokenizer, prompt, max_new_tokens=16, monitors=monitors,
                               on_token=kill_after_first_token)
    assert killed and out.finish_reason in {"length", "stop"} and out.stats.generated_tokens >= 1
    assert server.wait_ready(30) and server.pid != killed[0]  # restarted in the background


def test_stalled_server_leaves_steps_unconstrained(smollm2: tuple[Any, Any], own_project: Path) -> None:
    model, tokenizer = smollm2
    monitors = for_workspace(own_project, "main.py", timeout_s=0.2)
    server = monitors[0].file.server
    prompt = (own_project / "main.py").read_text() + "inv."
    os.kill(server.pid, signal.SIGSTOP)
    try:
        out = constrained_generate(model, tokenizer, prompt, max_new_tokens=8, monitors=monitors)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert out.stats.monitors.timeouts >= 1 and out.stats.generated_tokens == 8
    assert out.stats.monitors.wait_s < 2.0  # one timeout, not one per step


def test_monitor_mask_is_anded_with_the_grammar(smollm2: tuple[Any, Any], project: Path, main_prefix: str) -> None:
    from codemask import Grammar

    model, tokenizer = smollm2
    monitors = for_workspace(project, "main.py")
    both = constrained_generate(model, tokenizer, main_prefix + "inv.", Grammar.from_regex(r"[a-z][a-z_]*\("),
                                max_new_tokens=12, monitors=monitors)
    assert both.finish_reason == "grammar_end" and both.text.endswith("(")
    assert both.text[:-1] in INVENTORY_MEMBERS  # a member, and what the grammar allows (no dunder)
    # the grammar allows only a name the server does not know: the AND is empty, the grammar wins
    alone = constrained_generate(model, tokenizer, main_prefix + "inv.", Grammar.from_regex(r"zzz"),
                                 max_new_tokens=6, monitors=monitors)
    assert alone.text == "zzz"


def closed_call(head: str, text: str) -> ast.Call | None:
    """The call ``head + text`` closes first (``head`` ends inside its argument list), or None."""
    for at in [i for i, char in enumerate(text) if char == ")"]:
        try:
            tree = ast.parse(head + text[: at + 1])
        except SyntaxError:
            continue
        call = tree.body[-1].value if isinstance(tree.body[-1], ast.Expr | ast.Assign) else None
        if isinstance(call, ast.Call):
            return call
    return None


def test_generated_calls_respect_the_arity(smollm2: tuple[Any, Any], project: Path, main_prefix: str) -> None:
    model, tokenizer = smollm2
    monitors = for_workspace(project, "main.py")
    # `restock_shelf(name, count=1, *, urgent=False)`: SmolLM2 writes a third positional argument
    head = 'inv.restock_shelf("tea", 3, '
    plain = constrained_generate(model, tokenizer, main_prefix + head, max_new_tokens=12)
    guided = constrained_generate(model, tokenizer, main_prefix + head, max_new_tokens=12, monitors=monitors)
    too_many = closed_call(head, plain.text)
    assert too_many is not None and len(too_many.args) == 3, plain.text
    call = closed_call(head, guided.text)
    assert call is not None, guided.text
    assert len(call.args) <= 2 and {k.arg for k in call.keywords} <= {"urgent"}, guided.text
    # `quote_price(base, quantity, discount_rate=0.0)`: SmolLM2 closes it after one argument
    head = "total = quote_price("
    plain = constrained_generate(model, tokenizer, main_prefix + head, max_new_tokens=12)
    guided = constrained_generate(model, tokenizer, main_prefix + head, max_new_tokens=12, monitors=monitors)
    too_few = closed_call(head, plain.text)
    assert too_few is not None and len(too_few.args) == 1, plain.text
    call = closed_call(head, guided.text)
    assert call is not None and 2 <= len(call.args) + len(call.keywords) <= 3, guided.text
    assert guided.stats.monitors.timeouts == 0


def test_case_pattern_is_an_enum_member(smollm2: tuple[Any, Any], project: Path) -> None:
    model, tokenizer = smollm2
    prefix = "from shop.colors import Shade\n\n\ndef describe(s: Shade) -> str:\n    match s:\n        case Shade."
    plain = constrained_generate(model, tokenizer, prefix, max_new_tokens=6)
    guided = constrained_generate(model, tokenizer, prefix, max_new_tokens=6,
                                  monitors=for_workspace(project, "main.py"))
    assert member_name(plain.text) not in {"CRIMSON", "TEAL"}, plain.text
    assert member_name(guided.text) in {"CRIMSON", "TEAL"}, guided.text


def test_monitors_with_speculation_give_the_same_tokens(smollm2: tuple[Any, Any], project: Path,
                                                        main_prefix: str) -> None:
    """Verification rows ask the monitors about each drafted position's text: greedy output with
    ``speculative="auto"`` is that of monitored plain decoding."""
    model, tokenizer = smollm2
    prompt = main_prefix + "inv."
    monitors = for_workspace(project, "main.py")
    plain = constrained_generate(model, tokenizer, prompt, max_new_tokens=24, monitors=monitors)
    fast = constrained_generate(model, tokenizer, prompt, max_new_tokens=24, monitors=monitors, speculative="auto")
    assert plain.stats.monitors.timeouts == fast.stats.monitors.timeouts == 0
    assert fast.token_ids == plain.token_ids
    assert fast.stats.speculative.drafted_tokens > 0 and fast.stats.monitors.steps >= 1


def test_deferred_probes_give_the_same_tokens_with_fewer_requests(
        smollm2: tuple[Any, Any], project: Path, main_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy decoding asks a probe (a merged ``.name`` token after a name) only when the model picks
    such a token, and writes what asking every probe up front writes."""
    model, tokenizer = smollm2
    prompt = main_prefix + "total = 0\nfor name, count in inv.shelves.items():\n    total"
    monitors = for_workspace(project, "main.py")
    deferred = constrained_generate(model, tokenizer, prompt, max_new_tokens=32, monitors=monitors)
    eager_stage = MonitorStage.for_generation
    monkeypatch.setattr(MonitorStage, "for_generation",
                        classmethod(lambda cls, m, v, p, defer=False, overlap=True: eager_stage(m, v, p, False)))
    eager = constrained_generate(model, tokenizer, prompt, max_new_tokens=32, monitors=monitors)
    assert deferred.stats.monitors.timeouts == eager.stats.monitors.timeouts == 0
    assert deferred.token_ids == eager.token_ids
    assert deferred.stats.monitors.queries < eager.stats.monitors.queries, (deferred.stats, eager.stats)


def test_requests_sent_before_the_forward_pass_give_the_same_tokens(
        smollm2: tuple[Any, Any], project: Path, main_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a CPU the stage sends a step's requests before the forward pass and reads their answers
    after it: the tokens are those of the monitors computed in a worker thread during the forward."""
    model, tokenizer = smollm2
    prompt = main_prefix + "total = inv."
    monitors = for_workspace(project, "main.py")
    server = monitors[0].file.server
    before = server.answered_ahead
    ahead = constrained_generate(model, tokenizer, prompt, max_new_tokens=24, monitors=monitors)
    assert server.answered_ahead > before
    stage = MonitorStage.for_generation
    monkeypatch.setattr(MonitorStage, "for_generation",
                        classmethod(lambda cls, m, v, p, defer=False, overlap=True: stage(m, v, p, defer, True)))
    threaded = constrained_generate(model, tokenizer, prompt, max_new_tokens=24, monitors=monitors)
    assert ahead.stats.monitors.timeouts == threaded.stats.monitors.timeouts == 0
    assert ahead.token_ids == threaded.token_ids
    assert ahead.stats.monitors.steps == threaded.stats.monitors.steps >= 1
