"""`GrammarCompiler`: compiled grammars are kept in memory, most recently used first, within a bound;
masks classified lazily are the masks precomputed at compile time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from codemask import Grammar, GrammarCompiler, GrammarMatcher
from codemask.engine import compiler as compiler_module
from codemask.engine import lexer_masks
from codemask.engine.compiler import CompiledGrammar
from codemask.engine.position_masks import LazyPositionMasks, PositionMasks
from codemask.engine.shared_positions import SharedPositions
from codemask.engine.token_trie import token_trie
from tests.data_paths import TEST_DATA
from tests.engine.conftest import encode, vocabulary

BENCH = TEST_DATA / "jsonschemabench"


def test_memory_keeps_the_most_recently_used_grammars_within_its_size() -> None:
    compiler = GrammarCompiler(vocabulary("gpt2"), cache_dir=False, progress=False, memory_size=2)
    grammars = [Grammar.from_regex(pattern) for pattern in ("a+", "b+", "c+")]
    a, b = compiler.compile(grammars[0]), compiler.compile(grammars[1])
    assert compiler.compile(grammars[0]) is a  # a is now the most recent
    c = compiler.compile(grammars[2])  # evicts b, the least recently used
    assert compiler.compile(grammars[0]) is a and compiler.compile(grammars[2]) is c
    b_again = compiler.compile(grammars[1])
    assert b_again is not b  # rebuilt (no disk cache here) ...
    assert (masks_along(b, b"bbb") == masks_along(b_again, b"bbb")).all()
    matcher = GrammarMatcher(b)  # ... and a matcher of the evicted one still works
    assert matcher.accept_bytes(b"bbb") and not matcher.accept_bytes(b"a")


def masks_along(compiled: CompiledGrammar, data: bytes, tokenizer_name: str = "gpt2") -> np.ndarray:
    """The bitmask before each token of ``data`` (tokenised by ``tokenizer_name``) and after the last."""
    matcher = GrammarMatcher(compiled)
    token_ids = encode(tokenizer_name, data.decode())
    rows = np.zeros((len(token_ids) + 1, (compiled.vocab_size + 31) // 32), dtype=np.int32)
    for i, token in enumerate(token_ids):
        matcher.fill_next_token_bitmask(rows, i)
        assert matcher.accept_token(token), (data, i)
    matcher.fill_next_token_bitmask(rows, len(token_ids))
    return rows


@pytest.mark.parametrize("schema_file", ["Glaiveai2K---calculate_tax_ca6130e8.json",
                                         "Kubernetes---kb_986_Normalized.json"])
def test_lazy_masks_equal_the_precomputed_ones_along_real_instances(schema_file: str) -> None:
    doc = json.loads((BENCH / schema_file).read_text())
    grammar = Grammar.from_json_schema(doc["schema"], mode="validate")
    vocab = vocabulary("llama3")
    shared = SharedPositions.of(token_trie(vocab))
    shared.clear()  # each side walks its own positions: neither may copy the other's from the cache
    lazy = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False).compile(grammar)
    eager = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=True).compile(grammar)
    assert isinstance(lazy.masks.masks, LazyPositionMasks) and isinstance(eager.masks.masks, PositionMasks)
    instances = [t["data"] for t in doc["tests"] if t["valid"]]
    assert instances
    assert eager.artifacts.masks is not None
    shared.clear()
    for instance in instances:
        for text in (json.dumps(instance), json.dumps(instance, indent=2)):
            assert (masks_along(lazy, text.encode(), "llama3") == masks_along(eager, text.encode(), "llama3")).all()
    classified = lazy.masks.masks.num_classified
    assert 0 < classified < len(np.flatnonzero(lazy.core.rtn.scanning))  # only the visited positions


def test_a_precomputing_compiler_completes_a_lazily_cached_grammar(tmp_path: Path) -> None:
    grammar = Grammar.from_regex(r"[a-z]+(, [a-z]+)*")
    vocab = vocabulary("gpt2")
    lazy = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, precompute=False).compile(grammar)
    assert lazy.artifacts.masks is None
    precomputed = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, precompute=True).compile(grammar)
    assert precomputed.artifacts.masks is not None
    again = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, precompute=False).compile(grammar)
    assert again.artifacts.masks is not None  # the fuller artifacts replaced the lazy ones on disk
    assert (masks_along(again, b"abc, de") == masks_along(precomputed, b"abc, de")).all()


def test_the_default_classifies_byte_level_positions_when_first_needed(tmp_path: Path) -> None:
    vocab = vocabulary("llama3")
    schema = json.loads((BENCH / "Kubernetes---kb_986_Normalized.json").read_text())["schema"]
    grammar = Grammar.from_json_schema(schema, mode="validate")
    compiled = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).compile(grammar)
    assert compiled.artifacts.masks is None and isinstance(compiled.masks.masks, LazyPositionMasks)
    assert compiled.masks.masks.num_classified == 0
    GrammarMatcher(compiled).next_token_bitmask()
    assert 0 < compiled.masks.masks.num_classified < int(compiled.artifacts.rtn.scanning.sum())
    # a precomputing compiler completes the lazy entry the default left in the disk cache
    reloaded = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, precompute=True).compile(grammar)
    assert isinstance(reloaded.masks.masks, PositionMasks)


def test_an_unknown_precompute_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="precompute must be True, False or 'auto', got 'always'"):
        GrammarCompiler(vocabulary("gpt2"), cache_dir=False, precompute="always")  # type: ignore[arg-type]


def test_a_lexer_grammars_saved_mask_state_comes_back_with_a_later_compile(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`save_mask_state` writes beside the compiled grammar; a later compiler of the same grammar
    and vocabulary starts with it (the same masks, the lexer states already classified), unless
    the engine's code changed since; a corrupt state file or a grammar of another kind leaves
    compiling as it was."""
    vocab, grammar = vocabulary("smollm2"), Grammar.builtin("sql")
    text = b"SELECT name, price FROM items WHERE price > 10 ORDER BY name;"
    first = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).compile(grammar)
    want = masks_along(first, text, "smollm2")
    path = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).save_mask_state(first)
    assert path is not None and path.exists() and path.parent == tmp_path
    classified = first.masks.num_classified  # type: ignore[union-attr]

    again = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).compile(grammar)
    assert again.masks.num_classified == classified > 5  # type: ignore[union-attr]
    with monkeypatch.context() as patched:  # loading built the trie: no mask waits for it
        patched.setattr(lexer_masks, "token_trie", lambda _vocab: pytest.fail("a mask built the trie"))
        assert (masks_along(again, text, "smollm2") == want).all()
    with monkeypatch.context() as patched:  # (precompute=False: no samples, so nothing but a state classifies)
        patched.setattr(compiler_module, "engine_fingerprint", lambda: "another-engine")
        other_engine = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, precompute=False).compile(grammar)
        assert not other_engine.masks.num_classified  # type: ignore[union-attr]

    path.write_bytes(b"not a cache entry")
    broken = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False, precompute=False).compile(grammar)
    assert not broken.masks.num_classified  # type: ignore[union-attr]
    assert (masks_along(broken, text, "smollm2") == want).all()

    regex = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).compile(Grammar.from_regex("[a-z]+"))
    assert GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).save_mask_state(regex) is None
    assert GrammarCompiler(vocab, cache_dir=False, progress=False).save_mask_state(first) is None


def test_a_lexer_grammar_precomputed_on_its_samples_has_the_lazy_masks(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``precompute=True`` runs the Python grammar's sample code at compile time: the grammar comes
    with lexer states classified, and its masks along a real file equal a lazy compile's. By
    default a compiler with a disk cache precomputes once and keeps the mask state there: a later
    compiler loads it instead of running the samples again."""
    import textwrap as module

    vocab, grammar = vocabulary("smollm2"), Grammar.builtin("python")
    text = Path(module.__file__).read_text(encoding="utf-8")[:3000].encode()
    precomputed = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=True).compile(grammar)
    lazy = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=False).compile(grammar)
    assert precomputed.masks.num_classified > 100  # type: ignore[union-attr]
    assert not lazy.masks.num_classified  # type: ignore[union-attr]
    no_cache = GrammarCompiler(vocab, cache_dir=False, progress=False).compile(grammar)  # default: nowhere to keep it
    assert not no_cache.masks.num_classified  # type: ignore[union-attr]
    completion = GrammarCompiler(vocab, cache_dir=False, progress=False, precompute=True).compile(
        Grammar.builtin("python", until="statement"))  # a completion twin has the same samples
    assert completion.masks.num_classified > 100  # type: ignore[union-attr]
    assert (masks_along(precomputed, text, "smollm2") == masks_along(lazy, text, "smollm2")).all()

    GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).compile(grammar)
    assert list(tmp_path.glob("*.masks-*.cmc"))

    def refuse(*_args: object) -> None:
        raise AssertionError("the samples ran again")

    monkeypatch.setattr(compiler_module, "sample_tokens", refuse)
    later = GrammarCompiler(vocab, cache_dir=tmp_path, progress=False).compile(grammar)
    assert later.masks.num_classified > 100  # type: ignore[union-attr]


def test_a_grammar_compiled_by_two_threads_at_once_is_compiled_once() -> None:
    """The second caller waits for the first (compiling runs outside the compiler's lock) and gets
    the same compiled grammar, while the main thread compiles another one."""
    import threading

    compiler = GrammarCompiler(vocabulary("smollm2"), cache_dir=False, progress=False, precompute=True)
    found: list[CompiledGrammar] = []
    threads = [threading.Thread(target=lambda: found.append(compiler.compile(Grammar.builtin("python"))))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    other = compiler.compile(Grammar.from_regex("[a-z]+"))
    for thread in threads:
        thread.join()
    assert len(found) == 2 and found[0] is found[1] and other is not found[0]


def test_a_compiled_grammar_keeps_a_record_of_its_grammar_but_not_the_rules() -> None:
    """The rules of a large schema are tens of thousands of objects the garbage collector would walk
    in every full collection: once compiled, nothing of codemask's keeps them (the record keeps the
    kind, output, options and cache key), and the compiled grammar works on."""
    import gc

    from codemask.errors import GrammarError
    from codemask.grammar.ir import Literal

    marker = "zq_only_in_this_schema"
    grammar = Grammar.from_json_schema({"type": "object", "properties": {marker: {"type": "integer"}},
                                        "required": [marker]})
    compiled = GrammarCompiler(vocabulary("gpt2"), cache_dir=False).compile(grammar)
    record = compiled.grammar
    assert (record.kind, record.output, record.cache_key) == (grammar.kind, "json", grammar.cache_key)
    with pytest.raises(GrammarError, match="without the rules"):
        _ = record.ir
    assert "zq_only_in_this_schema" in str(grammar.ir.rules)  # (the user's grammar keeps them)
    del grammar
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is Literal and marker.encode() in o.value]
    matcher = GrammarMatcher(compiled)
    for token in encode("gpt2", '{"' + marker + '": 12}'):
        assert matcher.is_token_allowed(token) and matcher.accept_token(token)
    assert matcher.can_terminate()
