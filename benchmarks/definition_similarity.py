"""How alike consecutive function definitions are in real code, beside the loops RPG leaves unended.

Qwen2.5-Coder's completions that RPG leaves at the length limit on held-out CodeRepetEval prompts write
new functions one after another (``vowels_count2`` … ``vowels_count5``, ``isperfectsquare``,
``isperfectcube``, …): new names, their own bodies, docstrings close to the one before. A repetition rule
could only end them by keying on that likeness, so this measures how often real code has it, with the same
measures on both sides. Over every pair of consecutive undecorated functions of one block (module, class or
function body) it reports:

- ``structure``: pairs whose statement units (:func:`codemask.repetition.units.statement_units`, what RPG
  sees) have the same labels, and how alike their words are (:mod:`codemask.repetition.likeness`:
  difflib ratio over word and punctuation tokens, each function's own name blanked out; what
  :attr:`codemask.RPG.copied_docstring` measures);
- ``clones``: functions equal to an earlier one of the same block once each one's own name is blanked out;
- ``docstrings``: pairs with multi-line docstrings, and how alike those are (the same word-level ratio).

The real code is this interpreter's standard library (``sysconfig``'s ``stdlib`` path, site-packages
excluded); the loops are the pairs in the RPG outputs stored by ``repetition_eval.py`` that ran to the
length limit — by default two held-out runs made before ``RPG(copied_docstring=...)`` existed, whose
unended samples are the loops it was built for (``benchmarks/data/rpg_loops/``). Writes
``benchmarks/results/definition_similarity.{json,md,png}``.

    benchmarks/.venv/bin/python benchmarks/definition_similarity.py [--loops FILE.json,...]
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codemask.repetition.likeness import blank_name, likeness, words
from codemask.repetition.units import statement_units
from publish import RESULTS

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
BINS = 20
# repetition_eval.py outputs on held-out prompts without RPG.copied_docstring: the loops it was built for
LOOPS = Path(__file__).resolve().parent / "data" / "rpg_loops"
LOOP_RESULTS = (LOOPS / "heldout20.json", LOOPS / "heldout10.json")


@dataclass
class Pair:
    """Two consecutive functions of one block: their source, names and docstrings."""

    first: str
    second: str
    first_name: str
    second_name: str
    first_doc: str | None
    second_doc: str | None


Function = tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]  # a definition and its source text


def blocks(source: str) -> list[list[Function]]:
    """The undecorated functions of every block (module, class or function body) of ``source``, in order."""
    lines = source.splitlines(keepends=True)
    found = []
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            defs = [d for d in body if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef) and not d.decorator_list]
            found.append([(d, "".join(lines[d.lineno - 1: d.end_lineno])) for d in defs])
    return found


def function_pairs(functions: list[list[Function]]) -> list[Pair]:
    """The consecutive pairs of each block's functions."""
    return [Pair(ta, tb, a.name, b.name, ast.get_docstring(a, clean=False), ast.get_docstring(b, clean=False))
            for block in functions for (a, ta), (b, tb) in itertools.pairwise(block)]


def clones(functions: list[list[Function]]) -> int:
    """Functions equal to an earlier function of their block once each one's own name is blanked out."""
    found = 0
    for block in functions:
        shapes = [blank_name(text, d.name) for d, text in block]
        found += len(shapes) - len(set(shapes))
    return found


def measure(pairs: list[Pair]) -> dict[str, list[float]]:
    """Each pair's likeness: of the whole functions where the statement structure is the same, of docstrings."""
    structure, docstrings = [], []
    for p in pairs:
        if [u.label for u in statement_units(p.first)] == [u.label for u in statement_units(p.second)]:
            structure.append(likeness(words(p.first, p.first_name), words(p.second, p.second_name)))
        if p.first_doc and p.second_doc and p.second_doc.count("\n") >= 2:
            docstrings.append(likeness(words(p.first_doc, p.first_name), words(p.second_doc, p.second_name)))
    return {"structure": structure, "docstrings": docstrings}


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)


def parseable_prefix(code: str) -> str | None:
    """The longest run of whole lines from the start of ``code`` that parses (a cut-off completion's code)."""
    lines = code.split("\n")
    for end in range(len(lines), 0, -1):
        prefix = "\n".join(lines[:end])
        try:
            ast.parse(prefix)
        except SyntaxError:
            continue
        return prefix
    return None


def loop_pairs(paths: list[Path]) -> tuple[list[Pair], int]:
    """Consecutive function pairs in the prompt + RPG output of every sample RPG left at the length limit."""
    from repetition_eval import coderepeteval_prompts

    pairs, samples = [], 0
    for path in paths:
        for entry in json.loads(path.read_text())["models"]:
            prompts = coderepeteval_prompts(entry["prompts"], entry["stride"], entry.get("offset", 0))
            for prompt, output in zip(prompts, entry["configs"]["rpg"]["outputs"], strict=True):
                code = parseable_prefix(prompt + output["text"]) if not output["ended"] else None
                if code is not None:
                    samples += 1
                    pairs += [p for p in function_pairs(blocks(code)) if p.second in code[len(prompt):]]
    return pairs, samples


def summary(values: list[float]) -> dict[str, Any]:
    """How many pairs, how many at each threshold, and the histogram the plot draws (20 bins over [0, 1])."""
    histogram = [0] * BINS
    for v in values:
        histogram[min(int(v * BINS), BINS - 1)] += 1
    return {"pairs": len(values), **{f">={t}": sum(v >= t for v in values) for t in THRESHOLDS},
            "histogram": histogram}


def markdown(report: dict[str, Any]) -> str:
    real, loops = report["stdlib"], report["loops"]
    lines = [
        "### Likeness of consecutive functions (`benchmarks/definition_similarity.py`)",
        "",
        f"{report['date']}; real code: {real['files']} standard-library files of Python {report['python']} "
        f"({real['functions']} undecorated functions); loops: the generated function pairs of the "
        f"{loops['samples']} samples RPG left at the length limit in `{'`, `'.join(report['results'])}`. "
        "Likeness: difflib ratio over word and punctuation tokens, each function's own name blanked out.",
        "",
        "| pairs | source | pairs measured | " + " | ".join(f"≥ {t}" for t in THRESHOLDS) + " |",
        "|---|---|---:|" + "---:|" * len(THRESHOLDS),
    ]
    for key, title in (("structure", "same statement structure, whole functions"),
                       ("docstrings", "multi-line docstrings")):
        for source, data in (("standard library", real), ("RPG's unended loops", loops)):
            s = data[key]
            shares = " | ".join(f"{s[f'>={t}'] / s['pairs']:.0%}" if s["pairs"] else "—" for t in THRESHOLDS)
            lines.append(f"| {title} | {source} | {s['pairs']} | {shares} |")
    lines += ["", f"Clones (equal to an earlier function of the block, own names blanked out): "
                  f"{real['clones']} of {real['functions']} standard-library functions."]
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, title in zip(axes, ("structure", "docstrings"), ("same structure", "docstrings"), strict=True):
        for source, label in (("stdlib", "standard library"), ("loops", "RPG's unended loops")):
            counts = report[source][key]["histogram"]
            shares = [c / max(sum(counts), 1) for c in counts]
            ax.stairs(shares, [i / BINS for i in range(BINS + 1)], fill=True, alpha=0.55, label=label)
        ax.set_title(f"consecutive functions: {title}")
        ax.set_xlabel("likeness")
        ax.set_ylabel("share of pairs")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", default=",".join(map(str, LOOP_RESULTS)),
                        help="repetition_eval.py result files whose unended RPG samples are the loops")
    args = parser.parse_args()
    paths = [Path(name) for name in args.loops.split(",")]
    missing = [path for path in paths if not path.is_file()]
    if missing:
        parser.error(f"no file {missing[0]} (a repetition_eval.py result)")
    stdlib_pairs, functions, clone_count, files = [], 0, 0, 0
    for path in stdlib_files():
        try:
            found = blocks(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # test data that is not valid Python 3 source
        files += 1
        stdlib_pairs += function_pairs(found)
        functions += sum(len(block) for block in found)
        clone_count += clones(found)
    loops, samples = loop_pairs(paths)
    real_values, loop_values = measure(stdlib_pairs), measure(loops)
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "python": sys.version.split()[0],
        "results": [path.stem for path in paths],
        "stdlib": {"files": files, "functions": functions, "clones": clone_count,
                   **{k: summary(v) for k, v in real_values.items()}},
        "loops": {"samples": samples, **{k: summary(v) for k, v in loop_values.items()}},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "definition_similarity.json").write_text(json.dumps(report, indent=1) + "\n")
    table = markdown(report)
    (RESULTS / "definition_similarity.md").write_text(table + "\n")
    plot(report, RESULTS / "definition_similarity.png")
    print(table)


if __name__ == "__main__":
    main()
