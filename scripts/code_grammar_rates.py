"""Acceptance rates of the builtin code grammars on real files found on this machine, and on mutants.

    HF_HUB_OFFLINE=1 .venv/bin/python scripts/code_grammar_rates.py [--per-language N] [--mutants M]

For each language: files the language's parser accepts (tests/grammar/code_oracles.py) are fed byte
by byte through the engine (``Recognizer``); a file rejected by the grammar is a false rejection.
Then M single-edit mutants per file: of those the oracle rejects, how many the grammar rejects as a
complete program, and how soon (whether the prefix up to 80 / 1000 bytes past the edit is dead).
Sources: C — the C files under /usr and ~/.pyenv, preprocessed (``gcc -E -P``); JavaScript — .js
files of the installed npm packages (not minified); Java — the JDK's src.zip; Go — the few Go files
on the system plus tests/data/code/go; SQL — tests/data/code/sql. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import glob
import random
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "grammar"))
sys.path.insert(0, str(ROOT))

from code_oracles import ORACLES  # noqa: E402
from test_code_grammars import mutants  # noqa: E402

from codemask import Grammar  # noqa: E402
from codemask.engine.recognizer import Recognizer  # noqa: E402


def find(roots: list[str], suffix: str) -> list[str]:
    """Files under ``roots`` whose name ends with ``suffix`` (``find``: Python's recursive glob follows
    symbolic links and takes minutes on /usr)."""
    done = subprocess.run(["find", *roots, "-type", "f", "-name", f"*{suffix}"], capture_output=True, text=True)
    return sorted(done.stdout.split())


def c_sources(limit: int, rng: random.Random) -> list[str]:
    """System C files that gcc accepts, preprocessed (so macros are expanded)."""
    found = [p for p in find(["/usr/share", "/usr/include", "/root/.pyenv"], ".c") if "/test/" not in p]
    rng.shuffle(found)
    includes = ["-I" + sysconfig.get_paths()["include"], "-I/usr/include/libxml2"]
    out: list[str] = []
    for path in found:
        done = subprocess.run(["gcc", "-E", "-P", "-w", *includes, "-I" + str(Path(path).parent), path],
                              capture_output=True, text=True, errors="replace")
        if done.returncode == 0 and 0 < len(done.stdout.strip()) < 150_000 and ORACLES["c"](done.stdout):
            out.append(done.stdout)
        if len(out) >= limit:
            break
    return out


def js_sources(limit: int, rng: random.Random) -> list[str]:
    found = find(["/usr/lib/node_modules"], ".js")
    rng.shuffle(found)
    out: list[str] = []
    for path in found:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        minified = max(map(len, text.splitlines()), default=0) >= 400
        if 200 < len(text) < 40_000 and not minified and ORACLES["javascript"](text):
            out.append(text)
        if len(out) >= limit:
            break
    return out


def java_sources(limit: int, rng: random.Random) -> list[str]:
    zips = sorted(glob.glob("/usr/lib/jvm/*/lib/src.zip"))
    if not zips:
        raise RuntimeError("no JDK src.zip found")
    archive = zipfile.ZipFile(zips[-1])
    names = [n for n in archive.namelist() if n.endswith(".java")]
    rng.shuffle(names)
    out: list[str] = []
    for name in names:
        text = archive.read(name).decode("utf-8", errors="replace")
        if 500 < len(text) < 30_000 and ORACLES["java"](text):
            out.append(text)
        if len(out) >= limit:
            break
    return out


def go_sources(limit: int, rng: random.Random) -> list[str]:
    paths = find(["/usr/share"], ".go") + sorted(glob.glob(str(ROOT / "tests/data/code/go/*.go")))
    texts = [Path(p).read_text(encoding="utf-8") for p in paths]
    return [t for t in texts if ORACLES["go"](t)][:limit]


def sql_sources(limit: int, rng: random.Random) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests/data/code/sql").glob("*.sql"))][:limit]


SOURCES = {"sql": sql_sources, "c": c_sources, "go": go_sources, "java": java_sources, "javascript": js_sources}


def dead_within(recognizer: Recognizer, data: bytes, edit: int, slack: int) -> bool:
    """Whether the grammar refuses ``data`` no later than ``slack`` bytes past the edit at ``edit``."""
    return not recognizer.accepts_prefix(data[:edit + slack + 1])


def edit_offset(original: str, mutant: str) -> int:
    """Byte offset of the first difference between a text and its mutant."""
    a, b = original.encode(), mutant.encode()
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def measure(language: str, per_language: int, mutants_per_file: int) -> dict[str, object]:
    rng = random.Random(0)
    start = time.perf_counter()
    texts = SOURCES[language](per_language, rng)
    recognizer = Recognizer(Grammar.builtin(language))
    accepted = sum(recognizer.accepts(t.encode()) for t in texts)
    invalid = rejected = false_rejections = 0
    within = {80: 0, 1000: 0}
    for index, text in enumerate(texts[: max(1, per_language // 3)]):
        for mutant in mutants(text, mutants_per_file, seed=index):
            grammar_ok = recognizer.accepts(mutant.encode())
            if ORACLES[language](mutant):
                false_rejections += not grammar_ok
                continue
            invalid += 1
            if not grammar_ok:
                rejected += 1
                edit = edit_offset(text, mutant)
                for slack in within:  # a truncated program is refused at its end, which is the edit
                    within[slack] += text.startswith(mutant) or dead_within(recognizer, mutant.encode(), edit, slack)
    return {"language": language, "files": len(texts), "accepted": accepted, "invalid_mutants": invalid,
            "rejected": rejected, "mutant_false_rejections": false_rejections,
            "within_80": within[80], "within_1000": within[1000], "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-language", type=int, default=60)
    parser.add_argument("--mutants", type=int, default=5)
    parser.add_argument("languages", nargs="*", default=list(SOURCES))
    args = parser.parse_args()
    print("| language | real files accepted | invalid mutants rejected | rejected within 80 bytes of the edit "
          "| within 1000 bytes | valid mutants rejected | time |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for language in args.languages:
        r = measure(language, args.per_language, args.mutants)
        print(f"| {language} | {r['accepted']}/{r['files']} | {r['rejected']}/{r['invalid_mutants']} | "
              f"{r['within_80']}/{r['rejected']} | {r['within_1000']}/{r['rejected']} | "
              f"{r['mutant_false_rejections']} | "
              f"{r['seconds']:.0f} s |", flush=True)


if __name__ == "__main__":
    main()
