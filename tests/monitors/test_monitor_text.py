"""Positions, edits, snippets and the code scanner: the text side of the protocol."""

from __future__ import annotations

from codemask.monitors.monitor import completion_names, keyword_names
from codemask.monitors.spec import language_spec
from codemask.monitors.text import CodeScanner, minimal_edit, position_of, strip_snippet


def test_positions_count_utf16_units() -> None:
    text = 'a = "😀𝔘é"\nb = "😀".x'
    assert position_of(text, len(text)) == {"line": 1, "character": len('b = "') + 2 + len('".x')}
    assert position_of(text, text.index("\n")) == {"line": 0, "character": 5 + 2 + 2 + 1 + 1}


def test_minimal_edit_and_its_exact_revert() -> None:
    old = 'x = "😀"\ninv.re'
    new = 'x = "😀"\ninv.restock_shelf('
    edit = minimal_edit(old, new)
    assert edit is not None and old[: edit.start] + edit.text + old[edit.end:] == new
    back = minimal_edit(new, old)
    assert back is not None and new[: back.start] + back.text + new[back.end:] == old
    change = edit.as_change(old)
    assert change["range"] == {"start": {"line": 1, "character": 6}, "end": {"line": 1, "character": 6}}
    assert minimal_edit(old, old) is None


def test_snippets_are_stripped() -> None:
    assert strip_snippet("append(${1:item})$0") == "append(item)"
    assert strip_snippet("sort(${1|key,reverse|})") == "sort(key)"
    assert strip_snippet("a\\$b") == "a$b"


def test_completion_names_use_the_inserted_text() -> None:
    result = {"isIncomplete": True, "items": [
        {"label": "append(x)", "insertText": "append(${1:x})", "insertTextFormat": 2},
        {"label": "extend", "textEdit": {"newText": "extend", "range": {}}},
        {"label": "while", "kind": 14},
        {"label": "pop"},
    ]}
    answer = completion_names(result)
    assert answer is not None and answer.names == ("append", "extend", "pop") and answer.incomplete


def test_keyword_names_from_signatures() -> None:
    label = "def f(a, /, b: int, *args, c=1)"
    params = [{"label": "a"}, {"label": "/"}, {"label": [label.index("b: int"), label.index("b: int") + 6]},
              {"label": "*args"}, {"label": "c=1"}]
    answer = keyword_names({"signatures": [{"label": label, "parameters": params}]})
    assert answer is not None and answer.names == ("b", "c")
    assert keyword_names({"signatures": [{"label": "g(**kw)", "parameters": [{"label": "**kw"}]}]}) is None


def test_scanner_knows_strings_comments_and_brackets() -> None:
    code = language_spec("python").code
    scanner = CodeScanner(code["strings"], code["unterminated"], code["comments"], code["starts"])
    assert scanner.scan('x = f(a, "b)", ')[0]
    in_code, brackets = scanner.scan('x = f(a, "b)", ')
    assert in_code and [b[0] for b in brackets] == ["("] and brackets[0][2] == len('x = f(a, "b)"')
    assert not scanner.scan('x = "abc.')[0]
    assert not scanner.scan('x = 1  # obj.')[0]
    assert scanner.scan('x = 1  # obj.\ny.')[0]
    assert not scanner.scan('s = """doc\nobj.')[0]
    assert scanner.scan('s = """doc\nobj."""\nobj.')[0]
