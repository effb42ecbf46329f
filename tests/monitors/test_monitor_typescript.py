"""TypeScript monitors through typescript-language-server: enum members, call arity, `new`, imports."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from codemask.monitors import Monitor, for_workspace, shutdown_all
from tests.monitors.conftest import Vocab, require_server, smollm2_names

LIB = """export enum Color { Red, Green, Blue }
export class Inventory {
  capacity = 1;
  constructor(public name: string, size?: number) {}
  restockShelf(name: string, count: number): void {}
}
export function quotePrice(base: number, quantity: number, discount?: number): number { return base; }
export const VAT = 0.2;
export interface Shape { w: number }
"""
HEAD = 'import { Color, Inventory, quotePrice } from "./lib";\nfunction helper(): number { return 1; }\n'


@pytest.fixture(scope="module")
def ts_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    require_server("typescript")
    root = tmp_path_factory.mktemp("ts")
    (root / "lib.ts").write_text(LIB, encoding="utf-8")
    yield root
    shutdown_all()


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return smollm2_names("typescript")


@pytest.fixture(scope="module")
def monitors(ts_project: Path) -> dict[str, Monitor]:
    return {type(m).__name__: m for m in for_workspace(ts_project, "main.ts", language="typescript")}


def allowed(monitor: Monitor, text: str, vocab: Vocab, *tokens: str,
            wait: bool = True) -> dict[str, bool]:
    """Whether each token is allowed after ``text``; waits while tsserver still loads the project
    (it answers nothing for a few seconds after a file is opened)."""
    ids, masks = vocab
    deadline = time.monotonic() + (40 if wait else 0)
    found = monitor.masks(text, masks)
    while not found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = monitor.masks(text, masks)
    return {t: bool(np.all([m[ids[t.encode()]] for m in found])) if found else True for t in tokens}


def test_enum_members_and_case_labels(monitors: dict[str, Monitor], vocab: Vocab) -> None:
    member = monitors["MemberAccessMonitor"]
    expected = {"Red": True, "Green": True, "Re": True, "name": False, "value": False}
    assert allowed(member, HEAD + "const c = Color.", vocab, *expected) == expected
    switch = HEAD + "function f(c: Color) {\n  switch (c) {\n    case Color."
    assert allowed(member, switch, vocab, *expected) == expected


def test_call_arity(monitors: dict[str, Monitor], vocab: Vocab) -> None:
    call = monitors["CallArgumentMonitor"]
    assert allowed(call, HEAD + "quotePrice(", vocab, ")", ",") == {")": False, ",": True}
    assert allowed(call, HEAD + "quotePrice(1, 2", vocab, ")", ",", wait=False) == {")": True, ",": True}
    assert allowed(call, HEAD + "quotePrice(1, 2, 3", vocab, ")", ",") == {")": True, ",": False}
    assert allowed(call, HEAD + 'new Inventory("a", 2', vocab, ")", ",") == {")": True, ",": False}
    assert allowed(call, HEAD + "Math.max(1, 2", vocab, ",", wait=False) == {",": True}  # ...values
    assert allowed(call, HEAD + "quotePrice(...xs", vocab, ")", ",", wait=False) == {")": True, ",": True}
    generic = allowed(call, HEAD + "quotePrice(1, new Map<string, number>().size", vocab, ",", wait=False)
    assert generic == {",": True}  # a comma inside type arguments: count unknown


def test_new_allows_what_may_be_constructed(monitors: dict[str, Monitor],
                                            vocab: Vocab) -> None:
    new = monitors["ConstructorMonitor"]
    after = allowed(new, HEAD + "const i = new ", vocab, "Inv", "Map", "Person", "(", "helper")
    assert after == {"Inv": True, "Map": True, "Person": False, "(": True, "helper": False}
    merged = allowed(new, HEAD + "const i = new", vocab, " Inv", " Map", " Person", " alert", " (")
    assert merged == {" Inv": True, " Map": True, " Person": False, " alert": False, " (": True}


def test_import_names_need_the_module_after_the_cursor(ts_project: Path,
                                                       vocab: Vocab) -> None:
    with_module = for_workspace(ts_project, "other.ts", language="typescript", suffix=' } from "./lib";\n')
    imports = next(m for m in with_module if type(m).__name__ == "ImportNameMonitor")
    first = allowed(imports, "import { ", vocab, "Color", "Inv", "Person", "}", "\n")
    assert first == {"Color": True, "Inv": True, "Person": False, "}": True, "\n": True}
    merged = allowed(imports, "import {", vocab, " Color", " Inv", " Person", " }")
    assert merged == {" Color": True, " Inv": True, " Person": False, " }": True}
    again = allowed(imports, "import { Color,", vocab, " Color", " Inv", " Shape")
    assert again == {" Color": False, " Inv": True, " Shape": True}  # the server leaves out what is imported
    later = allowed(imports, "import { Color, ", vocab, "Color", "Inv")
    assert later == {"Color": False, "Inv": True}  # and so does the monitor, asking where the list starts
    alone = for_workspace(ts_project, "third.ts", language="typescript")  # no `from "m"` after the cursor
    silent = next(m for m in alone if type(m).__name__ == "ImportNameMonitor")
    assert silent.masks("import { ", vocab[1]) == []
