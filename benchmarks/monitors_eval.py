"""Monitors: next-identifier match, existing names and monitor latency, with and without monitors.

PragmaticCode-style: small multi-module Python projects written for this benchmark
(``benchmarks/data/monitors/<project>/``: a package the model never sees, and one file that uses
it). Every member access, ``from <package>… import`` name and keyword argument of the using file
whose name the package defines is one task: the prompt is that file up to the name, the answer the
name. Every call of a package-defined callable is a *call* task too: the prompt is the file up to
its ``(``, and the generated argument list is judged against the callee's signature. The model sees
only the prompt; the monitors (``codemask.monitors.for_workspace``) see the project through a
language server.

Metrics per model and configuration (greedy, ``--max-new-tokens`` tokens, the generated text's first
identifier after leading whitespace; one cut off by the token limit counts as none): *match* — it
is the answer; *exists* — of the member, import (and ``new``) names generated, the share that exist
(the oracle is a different server from the monitors': jedi's completions at the prompt, so a monitor
is not judged by itself; with ``--servers jedi`` it is; TypeScript has only
typescript-language-server, which judges itself); *bad names* — how many do not;
latency — the monitors' wall time per monitored step (server round-trips and masks, overlapped with
the forward pass), how long decoding waited for them per monitored step, server requests and their
median round-trip, timeouts; *call arity ok* — of the call tasks, the share whose generated call closes
(within ``--call-tokens``) with arguments the callee accepts: no positional argument too many, every
required parameter given, only its keyword names (the signature is jedi's, one signature only).
Configurations: ``none`` and one per ``--servers`` entry.

Targets: 0 bad names when the server answers; match >= 10 points above ``none``; warm
per-step overhead <= 2 ms (pyrefly, ty) and <= 15 ms (jedi), judged on each configuration's fastest
of ``--repeats`` rounds (3 by default; see `run_model`).

TypeScript (``--language typescript``): the projects in ``benchmarks/data/monitors_ts/<project>/``
(``lib/*.ts`` and ``app.ts``), tasks found by regex (member accesses, names in ``import { }`` — with
the rest of the line as the monitors' suffix —, calls, names after ``new``).

Usage: .venv/bin/python benchmarks/monitors_eval.py [--models smollm2,qwen-coder] [--servers pyrefly,jedi]
       [--max-new-tokens 10] [--call-tokens 24] [--kinds member,import,keyword,call] [--every K]
       [--threads N] [--repeats R] [--merge] [--render]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse
import ast
import json
import platform
import re
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from codemask import constrained_generate
from codemask.assets import load_model, load_tokenizer
from codemask.monitors import completion_names, for_workspace, keyword_names, language_spec, shutdown_all
from codemask.monitors.calls import CallShape, CallSyntax, call_shape
from publish import plot_model_panels, publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT / "benchmarks" / "data" / "monitors"
DATA_TS = ROOT / "benchmarks" / "data" / "monitors_ts"
ORACLE = "jedi"
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")


@dataclass
class Task:
    project: str
    file: str
    kind: str  # member | import | keyword | call
    prompt: str
    answer: str
    valid: list[str]
    signature: dict[str, Any] | None = None  # call tasks: the oracle's SignatureHelp
    language: str = "python"
    suffix: str = ""  # the text after the cursor the monitors see (TypeScript imports need the module)


KINDS = ("member", "import", "keyword", "call", "new")


def data_dir(language: str) -> Path:
    return DATA_TS if language == "typescript" else DATA


# -- tasks ---------------------------------------------------------------------------------------


def defined_names(package: Path) -> set[str]:
    """Names the project's package defines: classes, functions, parameters, attributes, globals."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                names.add(node.name)
            if isinstance(node, ast.arguments):
                names.update(a.arg for a in [*node.args, *node.kwonlyargs])
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            if isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names - {"self"}


def candidate_tasks(project: Path, usage: Path, package_names: set[str]) -> list[tuple[str, int, str]]:
    """(kind, offset of the name, name) for the first use of each package-defined name in ``usage``."""
    text = usage.read_text(encoding="utf-8")
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    found: dict[tuple[str, str], int] = {}
    package = project.name
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in package_names and node.end_lineno is not None:
            offset = starts[node.end_lineno - 1] + (node.end_col_offset or 0) - len(node.attr)
            found.setdefault(("member", node.attr), offset)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            for alias in node.names:
                found.setdefault(("import", alias.name), starts[alias.lineno - 1] + alias.col_offset)
        elif isinstance(node, ast.keyword) and node.arg in package_names:
            found.setdefault(("keyword", node.arg), starts[node.lineno - 1] + node.col_offset)
        if isinstance(node, ast.Call) and _callee_name(node) in package_names and node.func.end_lineno is not None:
            opened = starts[node.func.end_lineno - 1] + (node.func.end_col_offset or 0)
            found.setdefault(("call", _callee_name(node)), text.index("(", opened) + 1)
    return sorted((kind, offset, name) for (kind, name), offset in found.items())


def _callee_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def build_tasks() -> list[Task]:
    """Every project's tasks, each with the names the oracle server says are valid at its prompt."""
    tasks: list[Task] = []
    for project in sorted(p for p in DATA.iterdir() if p.is_dir()):
        usage = next(p for p in sorted(project.glob("*.py")))
        oracle = for_workspace(project, usage.name, server=ORACLE, timeout_s=30.0)[0].file
        text = usage.read_text(encoding="utf-8")
        for kind, offset, name in candidate_tasks(project, usage, defined_names(project / project.name)):
            prompt = text[:offset]
            if kind == "call":
                signature = oracle.request("textDocument/signatureHelp", prompt)
                shape = call_shape(signature, CALL_SYNTAX)
                if shape is not None and shape.parameters is not None:
                    tasks.append(Task(project.name, usage.name, kind, prompt, name, [], signature))
                continue
            method = "textDocument/signatureHelp" if kind == "keyword" else "textDocument/completion"
            parse = keyword_names if kind == "keyword" else completion_names
            answer = parse(oracle.request(method, prompt))
            valid = sorted(answer.names) if answer is not None else []
            if name in valid:
                tasks.append(Task(project.name, usage.name, kind, prompt, name, valid))
    return tasks


CALL_SYNTAX = CallSyntax.from_trigger(language_spec("python").triggers["call"])


def call_accepted(arguments: str, task: Task) -> bool:
    """Whether ``arguments`` (generated after a call's ``(``) close the call with arguments the
    signature accepts; an argument list left open, or one with unpacking, is not accepted."""
    if task.language == "typescript":
        return ts_call_accepted(arguments, task.signature)
    shape = call_shape(task.signature, CALL_SYNTAX)
    call = _closed_call(arguments)
    if shape is None or shape.parameters is None or call is None:
        return False
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return False
    return _fits(shape, len(call.args), [k.arg for k in call.keywords if k.arg is not None])


def _closed_call(arguments: str) -> ast.Call | None:
    for at in [i for i, char in enumerate(arguments) if char == ")"]:
        try:
            tree = ast.parse("f(" + arguments[: at + 1], mode="eval")
        except SyntaxError:
            continue
        return tree.body if isinstance(tree.body, ast.Call) else None
    return None


def _fits(shape: CallShape, positional: int, keywords: list[str]) -> bool:
    assert shape.parameters is not None
    if shape.max_positional is not None and positional > shape.max_positional:
        return False
    if shape.keywords is not None and not set(keywords) <= set(shape.keywords):
        return False
    taken = [p.name for p in shape.parameters if p.positional][:positional]
    if set(taken) & set(keywords) or len(set(keywords)) < len(keywords):
        return False
    return all(p.name in taken or p.name in keywords for p in shape.parameters if p.required)


# -- TypeScript ----------------------------------------------------------------------------------

TS_SYNTAX = CallSyntax.from_trigger(language_spec("typescript").triggers["call"])
_TS_DECLARED = re.compile(r"(?:class|function|enum|interface|const)\s+(\w+)|public\s+(\w+)"
                          r"|^\s+(?:private\s+|readonly\s+)*(\w+)\s*[(:=]", re.M)
_TS_ENUM = re.compile(r"enum\s+\w+\s*\{([^}]*)\}")
_TS_FIELDS = re.compile(r"interface\s+\w+\s*\{([^}]*)\}")


def ts_defined_names(lib: Path) -> set[str]:
    """Names the TypeScript library declares (classes, functions, members, enum members), by regex."""
    names: set[str] = set()
    for path in lib.rglob("*.ts"):
        text = path.read_text(encoding="utf-8")
        names.update(next(g for g in m.groups() if g) for m in _TS_DECLARED.finditer(text))
        for block in [*_TS_ENUM.findall(text), *_TS_FIELDS.findall(text)]:
            names.update(re.findall(r"(\w+)\s*(?:[,:}]|$)", block))
    return names - {"constructor", "return", "const", "this"}


def ts_candidates(text: str, names: set[str]) -> list[tuple[str, int, str, str]]:
    """(kind, offset, name, suffix) for the first use of each library name per kind in ``text``
    (before its template literal: the monitors are silent inside strings)."""
    end = text.index("return `") if "return `" in text else len(text)
    found: dict[tuple[str, str], tuple[int, str]] = {}
    for m in re.finditer(r"^import\s*\{([^}]*)\}\s*from", text, re.M):
        for name in re.finditer(r"\w+", m.group(1)):
            at = m.start(1) + name.start()
            found.setdefault(("import", name.group()), (at, text[at + len(name.group()):]))
    for m in re.finditer(r"new\s+(\w+)", text[:end]):
        found.setdefault(("new", m.group(1)), (m.start(1), ""))
    for m in re.finditer(r"(?<=[\w)\]]\.)(\w+)", text[:end]):
        found.setdefault(("member", m.group(1)), (m.start(1), ""))
    for m in re.finditer(r"(\w+)\(", text[:end]):
        found.setdefault(("call", m.group(1)), (m.end(), ""))
    return sorted((kind, at, name, suffix) for (kind, name), (at, suffix) in found.items() if name in names)


def build_ts_tasks() -> list[Task]:
    """TypeScript tasks from ``benchmarks/data/monitors_ts``; valid names and signatures from
    typescript-language-server itself (the only TypeScript server here: it judges its own monitor)."""
    tasks: list[Task] = []
    for project in sorted(p for p in DATA_TS.iterdir() if p.is_dir()):
        text = (project / "app.ts").read_text(encoding="utf-8")
        for kind, offset, name, suffix in ts_candidates(text, ts_defined_names(project / "lib")):
            oracle = for_workspace(project, "app.ts", language="typescript", suffix=suffix, timeout_s=30.0)[0].file
            prompt = text[:offset]
            if kind == "call":
                signature = _wait_for_answers(oracle, prompt, "textDocument/signatureHelp")
                shape = call_shape(signature, TS_SYNTAX)
                if shape is not None and shape.parameters is not None:
                    tasks.append(Task(project.name, "app.ts", kind, prompt, name, [], signature, "typescript"))
                continue
            answer = completion_names(_wait_for_answers(oracle, prompt))
            valid = sorted(answer.names) if answer is not None else []
            if name in valid:
                tasks.append(Task(project.name, "app.ts", kind, prompt, name, valid, None, "typescript", suffix))
    return tasks


def _wait_for_answers(file: Any, prompt: str, method: str = "textDocument/completion") -> Any:
    """The server's answer at ``prompt``, asked again while it is empty for up to 30 s (tsserver
    answers nothing while it loads the project after a file is opened)."""
    deadline = time.monotonic() + 30
    while True:
        result = file.request(method, prompt)
        empty = not result or (isinstance(result, dict) and not (result.get("items") or result.get("signatures")))
        if not empty or time.monotonic() > deadline:
            return result
        time.sleep(0.3)


def ts_call_accepted(arguments: str, signature: dict[str, Any] | None) -> bool:
    """Whether a generated TypeScript argument list closes with an argument count the signature takes."""
    shape = call_shape(signature, TS_SYNTAX)
    parts = _ts_closed_arguments(arguments)
    if shape is None or shape.parameters is None or parts is None or any(p.strip().startswith("...") for p in parts):
        return False
    count = len([p for p in parts if p.strip()])
    required = sum(p.required for p in shape.parameters)
    return required <= count and (shape.max_positional is None or count <= shape.max_positional)


def _ts_closed_arguments(text: str) -> list[str] | None:
    """The top-level arguments up to the ``)`` that closes the call, or None if it stays open."""
    depth, quote, parts, begin = 0, "", [], 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote and text[i - 1] != "\\" else quote
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return [*parts, text[begin:i]]
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[begin:i])
            begin = i + 1
    return None


# -- runs ----------------------------------------------------------------------------------------


def run_task(model: Any, tokenizer: Any, task: Task, server: str | None, max_new_tokens: int,
             call_tokens: int = 24) -> dict[str, Any]:
    """One task under one configuration (``server`` None: no monitors)."""
    monitors = None
    if server is not None:
        monitors = for_workspace(data_dir(task.language) / task.project, task.file, language=task.language,
                                 server=server, suffix=task.suffix)
        server_state = monitors[0].file.server
        seen = server_state.answered
    started = time.perf_counter()
    out = constrained_generate(model, tokenizer, task.prompt, monitors=monitors,
                               max_new_tokens=call_tokens if task.kind == "call" else max_new_tokens)
    seconds = time.perf_counter() - started
    written = out.text.lstrip()  # a keyword argument may start on the next line
    match = _IDENTIFIER.match(written)
    complete = match is not None and match.end() < len(written)  # not cut by max_new_tokens
    name = match.group() if match and complete else ""
    keyword_form = task.kind != "keyword" or bool(re.match(r"[A-Za-z_]\w*\s*=(?!=)", written))
    s = out.stats
    return {
        "project": task.project, "kind": task.kind, "answer": task.answer, "text": out.text, "name": name,
        "match": name == task.answer if task.kind != "call" else call_accepted(out.text, task),
        "named": bool(name) and keyword_form,
        "exists": name in task.valid, "seconds": seconds, "tokens": s.generated_tokens,
        "monitor_steps": s.monitor_steps, "monitor_queries": s.monitor_queries,
        "monitor_timeouts": s.monitor_timeouts, "monitor_time_s": s.monitor_time_s,
        "monitor_wait_s": s.monitor_wait_s,
        "server_ms": _last_latencies_ms(server_state, seen) if monitors else [],
    }


def _last_latencies_ms(server: Any, seen: int) -> list[float]:
    fresh = server.answered - seen
    return [1000 * x for x in list(server.latencies_s)[-fresh:]] if fresh > 0 else []


def summarise(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    """The configuration's figures; *match* is over the name tasks (a call task's ``match`` is
    whether its call was accepted, reported as ``match_by_kind["call"]``)."""
    named = [o for o in outputs if o["named"] and o["kind"] in ("member", "import", "new")]
    names = [o for o in outputs if o["kind"] != "call"]
    steps = sum(o["monitor_steps"] for o in outputs)
    server_ms = [x for o in outputs for x in o["server_ms"]]
    tokens = sum(o["tokens"] for o in outputs)
    return {
        "tasks": len(outputs),
        "match": sum(o["match"] for o in names) / len(names) if names else 0.0,
        "match_by_kind": {k: _share([o["match"] for o in outputs if o["kind"] == k]) for k in KINDS},
        "named": len(named),
        "exists": _share([o["exists"] for o in named]),
        "bad_names": sum(not o["exists"] for o in named),
        "monitor_steps": steps,
        "monitor_queries": sum(o["monitor_queries"] for o in outputs),
        "monitor_timeouts": sum(o["monitor_timeouts"] for o in outputs),
        "monitor_ms_per_step": 1000 * sum(o["monitor_time_s"] for o in outputs) / steps if steps else 0.0,
        "wait_ms_per_step": 1000 * sum(o["monitor_wait_s"] for o in outputs) / steps if steps else 0.0,
        "server_ms_p50": statistics.median(server_ms) if server_ms else 0.0,
        "server_ms_p90": statistics.quantiles(server_ms, n=10)[-1] if len(server_ms) >= 10 else 0.0,
        "ms_per_token": 1000 * sum(o["seconds"] for o in outputs) / tokens if tokens else 0.0,
    }


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def run_model(name: str, tasks: list[Task], servers: list[str], max_new_tokens: int,
              call_tokens: int = 24, repeats: int = 3) -> dict[str, Any]:
    """Every task under every configuration, the configurations of one task back to back: the wall
    time a configuration adds is a difference of runs seconds apart, not of passes minutes apart.

    With ``repeats`` > 1 each task runs that many rounds of every configuration and each
    configuration keeps its fastest run (greedy decoding writes the same tokens every time): a task
    is about ten forward passes, and one of them slowed by the machine (another job, a page fault)
    moves a single run's time by more than the monitors add, in either direction. The cost the
    monitors add is in every run, so the fastest runs keep it and shed the noise."""
    model, tokenizer = load_model(name), load_tokenizer(name)
    constrained_generate(model, tokenizer, "import os\nos.", max_new_tokens=2)  # first-call costs
    first = tasks[0]
    for server in servers:  # each server started and warm (its project loaded) before timing
        warm = for_workspace(data_dir(first.language) / first.project, first.file, language=first.language,
                             server=server, suffix=first.suffix)
        _wait_for_answers(warm[0].file, first.prompt)
        # the vocabulary's name masks are built once per process (1.6 s for Qwen's 151k tokens): not per step
        constrained_generate(model, tokenizer, first.prompt, monitors=warm, max_new_tokens=2)
    outputs: dict[str, list[dict[str, Any]]] = {config: [] for config in ["none", *servers]}
    for task in tasks:
        rounds: dict[str, list[dict[str, Any]]] = {config: [] for config in outputs}
        for _ in range(repeats):
            for config, runs in rounds.items():
                runs.append(run_task(model, tokenizer, task, None if config == "none" else config, max_new_tokens,
                                     call_tokens))
        for config, done in outputs.items():
            done.append(min(rounds[config], key=lambda run: run["seconds"]))
    configs = {config: {"summary": summarise(done), "outputs": done} for config, done in outputs.items()}
    for config, entry in configs.items():
        print(name, config, json.dumps(entry["summary"]), flush=True)
    kinds = {k: sum(t.kind == k for t in tasks) for k in KINDS}
    return {"model": name, "max_new_tokens": max_new_tokens, "tasks": len(tasks), "task_kinds": kinds,
            "repeats": repeats, "configs": configs}


# -- report --------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    sizes = "; ".join(f"{e['model']}: {e['tasks']} tasks ({e['task_kinds']['member']} member accesses, "
                      f"{e['task_kinds']['import']} imported names, {e['task_kinds']['keyword']} keyword arguments, "
                      f"{e['task_kinds'].get('call', 0)} calls, {e['task_kinds'].get('new', 0)} after `new`)"
                      for e in report["models"])
    typescript = report.get("language") == "typescript"
    data, oracle = ("monitors_ts", "typescript-language-server") if typescript else ("monitors", "jedi")
    lines = [
        "### Monitors (`benchmarks/monitors_eval.py`)",
        "",
        f"{report['machine']}, {report['date']}; tasks from {report['projects']} projects in "
        f"`benchmarks/data/{data}/` ({sizes}), greedy, the first identifier of "
        f"{report['models'][0]['max_new_tokens']} new tokens; "
        + "; ".join(f"`{e.get('command', report.get('command'))}`" for e in report["models"])
        + ". *match*: it is the name in "
        f"the file; *exists* / *bad names*: member and import names generated that {oracle} finds / does not find "
        "at the prompt; *monitor ms/step*: the monitors' time per monitored step (mostly beside the forward "
        "pass); *wait ms/step*: how long decoding waited for them; *added ms/step*: the wall time the monitors "
        "added per monitored step, over the tasks where both runs wrote as many tokens (on 2 cores the work "
        "beside the forward pass still slows it), each run the fastest of the model's `--repeats` rounds; "
        "*server ms*: request round-trip p50; "
        "*call arity ok*: generated calls whose arguments the callee accepts (— : no call tasks in that run). Outputs: "
        f"`benchmarks/results/{report.get('name', 'monitors_eval')}.json`.",
        "",
        "| model | monitors | match | member | import | keyword | new | call arity ok | exists | bad names | "
        "monitored steps | queries | timeouts | monitor ms/step | wait ms/step | added ms/step | server ms p50 | "
        "ms/token |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in report["models"]:
        for config, data in entry["configs"].items():
            r = data["summary"]
            by = r["match_by_kind"]
            added = added_ms_per_step(entry["configs"]["none"]["outputs"], data["outputs"])
            lines.append(
                f"| {entry['model']} | {config} | {r['match']:.0%} | {_pct(by['member'])} | {_pct(by['import'])} | "
                f"{_pct(by['keyword'])} | {_pct(by.get('new'))} | {_pct(by.get('call'))} | {_pct(r['exists'])} | "
                f"{r['bad_names']}/{r['named']} | "
                f"{r['monitor_steps']} | {r['monitor_queries']} | {r['monitor_timeouts']} | "
                f"{r['monitor_ms_per_step']:.1f} | {r['wait_ms_per_step']:.1f} | "
                f"{'—' if added is None else f'{added:.1f}'} | {r['server_ms_p50']:.1f} | "
                f"{r['ms_per_token']:.0f} |")
    return "\n".join(lines)


def added_ms_per_step(plain: list[dict[str, Any]], monitored: list[dict[str, Any]]) -> float | None:
    """Wall milliseconds the monitors added per monitored step: the monitored runs' time minus the
    plain runs' on the same tasks, over the tasks where both wrote as many tokens (a different
    length would count decoding, not monitoring); None for the plain configuration itself."""
    if monitored is plain:
        return None
    same = [(a, b) for a, b in zip(plain, monitored, strict=True) if a["tokens"] == b["tokens"]]
    steps = sum(b["monitor_steps"] for _, b in same)
    if not steps:
        return None
    return 1000 * sum(b["seconds"] - a["seconds"] for a, b in same) / steps


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def plot(report: dict[str, Any], path: Path) -> None:
    panels = [("match", "next-identifier match"), ("exists", "generated names that exist"),
              ("wait_ms_per_step", "decoding wait per monitored step (ms)")]
    configs = list(dict.fromkeys(c for e in report["models"] for c in e["configs"]))
    plot_model_panels(path, report["models"], configs, panels,
                      lambda entry, c, key: entry["configs"].get(c, {}).get("summary", {}).get(key) or 0.0,
                      "Monitors: tasks from benchmarks/data/monitors (sizes in the table)")


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="smollm2,qwen-coder")
    parser.add_argument("--servers", default="pyrefly,jedi", help="monitor configurations besides none")
    parser.add_argument("--max-new-tokens", type=int, default=10)
    parser.add_argument("--call-tokens", type=int, default=24, help="new tokens for a call task's arguments")
    parser.add_argument("--kinds", default=",".join(KINDS), help="task kinds to run")
    parser.add_argument("--language", default="python", choices=["python", "typescript"],
                        help="typescript: the projects in benchmarks/data/monitors_ts "
                             "(--servers typescript-language-server)")
    parser.add_argument("--name", default="monitors_eval",
                        help="results name under benchmarks/results (a run of some kinds only keeps its own)")
    parser.add_argument("--every", type=int, default=1, help="use every k-th task (a subset for slow models)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--repeats", type=_at_least_one, default=3,
                        help="rounds of every configuration per task, the fastest run of each kept (default 3: "
                             "one round's added ms/step is mostly machine noise; 1 for a quick look)")
    parser.add_argument("--merge", action="store_true", help="keep other models' results from the last run")
    parser.add_argument("--render", action="store_true", help="only redo the table and plot of the last results")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    path = RESULTS / f"{args.name}.json"
    if args.render:
        render(json.loads(path.read_text()), name=args.name)
        return

    started = time.time()
    kinds = set(args.kinds.split(","))
    built = build_ts_tasks() if args.language == "typescript" else build_tasks()
    tasks = [t for t in built if t.kind in kinds][:: args.every]
    print(f"{len(tasks)} tasks", flush=True)
    servers = [s for s in args.servers.split(",") if s]
    command = ".venv/bin/python " + " ".join(["benchmarks/monitors_eval.py", *sys.argv[1:]])
    listed = [asdict(t) | {"prompt": t.prompt[-80:]} for t in tasks]
    fresh = [run_model(name, tasks, servers, args.max_new_tokens, args.call_tokens, args.repeats)
             | {"every": args.every, "command": command, "task_list": listed}
             for name in args.models.split(",")]
    previous = json.loads(path.read_text())["models"] if args.merge and path.exists() else []
    names = {entry["model"] for entry in fresh}
    report: dict[str, Any] = {
        "machine": f"{platform.machine()} CPU, {torch.get_num_threads()} threads",
        "date": time.strftime("%Y-%m-%d"),
        "projects": len({t.project for t in tasks}),
        "models": [e for e in previous if e["model"] not in names] + fresh,
        "wall_s": time.time() - started,
        "name": args.name,
        "language": args.language,
    }
    shutdown_all()
    render(report, write_json=True, name=args.name)


def render(report: dict[str, Any], write_json: bool = False, name: str = "monitors_eval") -> None:
    """The results files, the printed table and the plot."""
    publish(name, report, markdown(report), plot, write_json=write_json)


if __name__ == "__main__":
    main()
