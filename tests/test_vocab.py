"""Vocabulary gives, for real tokenizers, exactly the bytes each token contributes to a text."""

from __future__ import annotations

import functools
import random
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from codemask import assets
from codemask.errors import CodemaskError
from codemask.vocab import Vocabulary

OPTIONAL = {"qwen-coder"}  # its tokenizer comes with the model: `bash scripts/setup.sh --models qwen-coder`
SENTENCEPIECE = {"mistral", "gemma3"}  # ▁ in the input text is read as a space
PREPENDS_SPACE = {"mistral"}  # legacy Llama-2 SentencePiece: encode("x") gives "▁x"
NFC_NORMALISED = {"qwen3", "qwen-coder"}  # the tokenizer composes characters before encoding
# SmolLM2's byte-level vocabulary lacks these bytes (six rare control characters, lead bytes of
# planes 1-2 and bytes UTF-8 never uses): its tokenizer silently drops them.
SMOLLM2_MISSING_BYTES = frozenset([0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, *range(0xF5, 0x100)])

TEXTS = [
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    '#include <stdio.h>\nint main(void) {\n\tprintf("%d\\n", 42);\n\treturn 0;\n}\n',
    '{"name": "codemask", "tags": ["a", "b"], "n": -1.5e-10, "ok": true, "x": null}',
    '[{"a":1},{"b":[2,3]}],"}\'',
    "中文字符和日本語のテキスト，한국어도",
    "emoji 🎉🧑\u200d💻👍🏽 flags 🇫🇷 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "   leading spaces and trailing   ",
    "\t\ttabs\n\n\nnewlines\r\nwindows\u00a0nbsp",
    "mixed: Привет, мир! مرحبا بالعالم नमस्ते ไทย Ελληνικά",
    "    " * 8 + "x = [  1,\t2,   3 ]" + "\n" * 5,
    "x" * 300,
    "ß ü é ñ å ø æ œ ç — “quotes” ‘single’ … ™ © ®",
    "",
    " ",
    "\n",
]


@functools.cache
def tokenizer_and_vocab(name: str) -> tuple[Any, Vocabulary]:
    if name in OPTIONAL:
        try:
            assets.model_dir(name)
        except CodemaskError:
            pytest.skip(f"tokenizer {name} is not installed: run `bash scripts/setup.sh --models {name}`")
    tokenizer = assets.load_tokenizer(name)
    return tokenizer, Vocabulary.from_tokenizer(tokenizer)


def expected_bytes(name: str, text: str) -> bytes:
    """The text a tokenizer's encoding stands for: the input, after the tokenizer's own normalisation.

    These are properties of the tokenizers, not of codemask: Qwen composes characters (NFC),
    SentencePiece reads ▁ as a space, legacy Llama-2 SentencePiece puts a space before the text, and
    SmolLM2 loses the bytes its vocabulary lacks.
    """
    if name in NFC_NORMALISED:
        text = unicodedata.normalize("NFC", text)
    if name in SENTENCEPIECE:
        text = text.replace("▁", " ")
    if name in PREPENDS_SPACE and text and not text.startswith(" "):
        text = " " + text
    if name == "smollm2":
        return bytes(b for b in text.encode() if b not in SMOLLM2_MISSING_BYTES)
    return text.encode()


def special_token_texts(name: str) -> list[str]:
    """The texts a tokenizer reads as one special token: such input becomes a control token, not text."""
    tokenizer, vocab = tokenizer_and_vocab(name)
    return [t for t in tokenizer.convert_ids_to_tokens(sorted(vocab.special_ids)) if t]


def assert_round_trip(name: str, text: str) -> None:
    tokenizer, vocab = tokenizer_and_vocab(name)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert b"".join(vocab.token_bytes[i] for i in ids) == expected_bytes(name, text)
    assert vocab.decode(ids) == expected_bytes(name, text)


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_token_bytes_concatenate_to_the_text(name: str, text: str) -> None:
    assert_round_trip(name, text)


HYPOTHESIS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CODE_LIKE = st.text(alphabet=st.sampled_from(list(" \t\n\r{}()[]<>:;,.'\"`\\/#=+-*_!?abcxyzXYZ019é中🎉▁")), max_size=60)


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
@HYPOTHESIS
@given(text=st.text(max_size=40))
def test_any_unicode_text_round_trips(name: str, text: str) -> None:
    # Hypothesis also draws string constants from codemask's source, such as "<|return|>".
    assume(not any(special in text for special in special_token_texts(name)))
    assert_round_trip(name, text)


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
@HYPOTHESIS
@given(text=CODE_LIKE)
def test_code_like_text_round_trips(name: str, text: str) -> None:
    assume(not any(special in text for special in special_token_texts(name)))
    assert_round_trip(name, text)


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
def test_special_token_text_is_read_as_a_control_token(name: str) -> None:
    """Input spelling a special token encodes to that token, which contributes no bytes."""
    tokenizer, vocab = tokenizer_and_vocab(name)
    eos = vocab.eos_token_id
    assert eos is not None
    eos_text = tokenizer.convert_ids_to_tokens(eos)
    ids = tokenizer.encode("a" + eos_text, add_special_tokens=False)
    assert ids[-1] == eos
    assert vocab.token_bytes[eos] == b""


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
def test_token_bytes_agree_with_the_tokenizers_decoder_in_mid_text(name: str) -> None:
    """Decoding an anchor then the token adds exactly the token's bytes (tokens with whole characters)."""
    tokenizer, vocab = tokenizer_and_vocab(name)
    (anchor,) = tokenizer.encode("a", add_special_tokens=False)[-1:]
    prefix = tokenizer.decode([anchor]).encode()
    candidates = [i for i in range(vocab.vocab_size) if i not in vocab.special_ids]
    checked = 0
    for i in random.Random(0).sample(candidates, 2000):
        if not _is_utf8(vocab.token_bytes[i]):
            continue  # the tokenizer would print U+FFFD: there is nothing to compare with
        assert tokenizer.decode([anchor, i]).encode() == prefix + vocab.token_bytes[i], i
        checked += 1
    assert checked > 1900


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("name", assets.TOKENIZER_NAMES)
def test_special_tokens_have_no_bytes_and_eos_stops(name: str) -> None:
    tokenizer, vocab = tokenizer_and_vocab(name)
    assert len(vocab.token_bytes) == vocab.vocab_size
    assert set(tokenizer.all_special_ids) <= vocab.special_ids
    assert all(vocab.token_bytes[i] == b"" for i in vocab.special_ids)
    assert all(vocab.token_bytes[i] for i in range(vocab.vocab_size) if i not in vocab.special_ids)
    assert vocab.eos_token_id == tokenizer.eos_token_id
    assert vocab.eos_token_id in vocab.stop_token_ids
    assert vocab.stop_token_ids <= vocab.special_ids


@pytest.mark.parametrize(
    ("name", "stop_tokens"),
    [
        ("llama3", {"<|end_of_text|>", "<|eot_id|>"}),
        ("qwen3", {"<|im_end|>", "<|endoftext|>"}),
        ("gemma3", {"<end_of_turn>", "<eos>"}),
        ("o200k", {"<|return|>", "<|endoftext|>", "<|end|>", "<|call|>"}),
        ("smollm2", {"<|im_end|>", "<|endoftext|>"}),
        ("mistral", {"</s>"}),
        ("gpt2", {"<|endoftext|>"}),
    ],
)
def test_end_of_turn_tokens_stop_by_default(name: str, stop_tokens: set[str]) -> None:
    tokenizer, vocab = tokenizer_and_vocab(name)
    assert set(tokenizer.convert_ids_to_tokens(sorted(vocab.stop_token_ids))) == stop_tokens


def test_explicit_stop_tokens_replace_the_defaults() -> None:
    tokenizer, _ = tokenizer_and_vocab("llama3")
    custom = Vocabulary.from_tokenizer(tokenizer, stop_token_ids=[128008])
    assert custom.stop_token_ids == {128001, 128008}
    assert Vocabulary.from_tokenizer(tokenizer, stop_token_ids=[]).stop_token_ids == {128001}


def test_id_gaps_in_cl100k_are_unused_and_size_the_mask() -> None:
    tokenizer, vocab = tokenizer_and_vocab("cl100k")
    assert len(tokenizer) == 100261  # the tokenizer counts its tokens, not its id range
    assert vocab.vocab_size == 100277  # <|endofprompt|> is id 100276
    gaps = [100256, *range(100261, 100276)]
    assert all(i in vocab.special_ids and vocab.token_bytes[i] == b"" for i in gaps)
    assert vocab.token_bytes[100255] != b""


def test_o200k_reserved_ids_are_special() -> None:
    _, vocab = tokenizer_and_vocab("o200k")
    assert vocab.vocab_size == 200019
    assert set(range(199998, 200019)) <= vocab.special_ids
    assert vocab.token_bytes[199997] != b""


def test_a_larger_model_vocabulary_pads_with_special_ids() -> None:
    tokenizer, vocab = tokenizer_and_vocab("smollm2")
    padded = Vocabulary.from_tokenizer(tokenizer, vocab_size=49152 + 64)
    assert padded.vocab_size == 49216
    assert padded.token_bytes[:49152] == vocab.token_bytes
    assert set(range(49152, 49216)) <= padded.special_ids
    assert padded.fingerprint != vocab.fingerprint


def test_a_smaller_vocab_size_never_truncates() -> None:
    """Gemma-3's tokenizer has an id (262144, <image_soft_token>) beyond the 262,144 logits of the model."""
    tokenizer, vocab = tokenizer_and_vocab("gemma3")
    assert Vocabulary.from_tokenizer(tokenizer, vocab_size=262144).vocab_size == 262145
    assert 262144 in vocab.special_ids


def test_qwen_coder_padding_tokens_are_special() -> None:
    """The GGUF vocabulary is padded to the model's 151,936 rows with tokens named [PAD<id>]."""
    tokenizer, vocab = tokenizer_and_vocab("qwen-coder")
    assert tokenizer.convert_ids_to_tokens(151935) == "[PAD151935]"
    assert set(range(151665, 151936)) <= vocab.special_ids
    assert vocab.token_bytes[151657] == b"<tool_call>"  # a normal added token stays text


@pytest.mark.parametrize(
    ("name", "text", "pieces"),
    [
        # byte-level BPE: a 4-byte emoji split 2 + 1 + 1, a CJK character whole
        ("gpt2", "🎉", [b"\xf0\x9f", b"\x8e", b"\x89"]),
        ("llama3", "𝔘", [b"\xf0\x9d", b"\x94", b"\x98"]),
        ("o200k", "🎉", [b"\xf0\x9f\x8e", b"\x89"]),
        ("qwen3", "𝔘", [b"\xf0\x9d\x94", b"\x98"]),
        ("deepseek_v3", "🎉", [b"\xf0\x9f\x8e", b"\x89"]),
        # SentencePiece byte fallback: <0xF0> <0x9D> <0x94> <0x98>
        ("gemma3", "𝔘", [b"\xf0", b"\x9d", b"\x94", b"\x98"]),
        ("mistral", "𝔘", [b" ", b"\xf0", b"\x9d", b"\x94", b"\x98"]),
    ],
)
def test_partial_utf8_tokens_are_raw_bytes(name: str, text: str, pieces: list[bytes]) -> None:
    tokenizer, vocab = tokenizer_and_vocab(name)
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert [vocab.token_bytes[i] for i in ids] == pieces
    assert "\ufffd" in tokenizer.decode(ids[-1:])  # what decoding one token at a time would give


def test_every_tokenizer_has_partial_utf8_tokens() -> None:
    for name in ("gpt2", "llama3", "qwen3", "gemma3", "mistral"):
        _, vocab = tokenizer_and_vocab(name)
        partial = [b for b in vocab.token_bytes if b and not _is_utf8(b)]
        assert len(partial) >= 128, name  # at least the continuation and lead bytes on their own


def test_smollm2_lacks_some_bytes() -> None:
    tokenizer, vocab = tokenizer_and_vocab("smollm2")
    single_bytes = {b[0] for b in vocab.token_bytes if len(b) == 1}
    assert set(range(256)) - single_bytes == SMOLLM2_MISSING_BYTES
    assert tokenizer.convert_ids_to_tokens(tokenizer.encode("a\x04b", add_special_tokens=False)) == ["a", "b"]


def test_sentencepiece_pieces() -> None:
    tokenizer, vocab = tokenizer_and_vocab("mistral")
    for piece, raw in [("▁def", b" def"), ("▁", b" "), ("<0x0A>", b"\n"), ("<0x09>", b"\t"), ("<0xE4>", b"\xe4")]:
        assert vocab.token_bytes[tokenizer.convert_tokens_to_ids(piece)] == raw
    # the decoder strips the space of the first token; in the middle of a text it is there
    (def_id,) = tokenizer.convert_tokens_to_ids(["▁def"])
    assert tokenizer.decode([def_id]) == "def"


def test_byte_level_pieces() -> None:
    tokenizer, vocab = tokenizer_and_vocab("gpt2")
    for piece, raw in [
        ("Ġhello", b" hello"),
        ("Ċ", b"\n"),
        ("ĉ", b"\t"),
        ("ĊĊ", b"\n\n"),
        ("Ġ", b" "),
        ("Ã©", b"\xc3\xa9"),
    ]:
        assert vocab.token_bytes[tokenizer.convert_tokens_to_ids(piece)] == raw


@pytest.mark.parametrize(
    ("name", "content"),
    [("qwen3", "<tool_call>"), ("deepseek_v3", "<｜fim▁hole｜>"), ("gemma3", "<unused0>"), ("gemma3", "\n\n")],
)
def test_added_tokens_that_are_not_special_are_their_content(name: str, content: str) -> None:
    tokenizer, vocab = tokenizer_and_vocab(name)
    token_id = tokenizer.convert_tokens_to_ids(content)
    assert token_id not in vocab.special_ids
    assert vocab.token_bytes[token_id] == content.encode()
    assert tokenizer.encode(content, add_special_tokens=False) == [token_id]


def test_fingerprints_differ_between_tokenizers_and_are_stable() -> None:
    names = [n for n in assets.TOKENIZER_NAMES if n not in OPTIONAL]
    prints = {name: tokenizer_and_vocab(name)[1].fingerprint for name in names}
    assert len(set(prints.values())) == len(names)
    tokenizer, vocab = tokenizer_and_vocab("gemma3")
    assert Vocabulary.from_tokenizer(tokenizer).fingerprint == vocab.fingerprint
    assert Vocabulary.from_tokenizer(tokenizer, stop_token_ids=[]).fingerprint != vocab.fingerprint
    same = Vocabulary.from_token_bytes(
        vocab.token_bytes,
        eos_token_id=vocab.eos_token_id,
        special_ids=vocab.special_ids,
        stop_token_ids=vocab.stop_token_ids,
    )
    assert same.fingerprint == vocab.fingerprint


def test_fingerprint_of_a_fixed_vocabulary_never_changes() -> None:
    """The compile cache on disk is keyed by it: a change here invalidates every user's cache."""
    vocab = Vocabulary.from_token_bytes([b"a", b"b", b"", b"ab"], eos_token_id=2, vocab_size=6)
    assert vocab.fingerprint == "1ac795d8ece14530f97e6a82fec7e6fbf75d2673b74cd1b25c57e82b5421e544"


def test_from_token_bytes() -> None:
    vocab = Vocabulary.from_token_bytes(
        [b"<s>", b"a", b"\xe4", b"", b"bc"], eos_token_id=0, special_ids=[0], stop_token_ids=[4], vocab_size=8
    )
    assert vocab.vocab_size == 8
    assert vocab.token_bytes == [b"", b"a", b"\xe4", b"", b"", b"", b"", b""]
    assert vocab.special_ids == {0, 3, 4, 5, 6, 7}  # declared, empty, stop, and padding ids
    assert vocab.stop_token_ids == {0, 4}
    assert vocab.decode([1, 2, 1]) == b"a\xe4a"
    with pytest.raises(CodemaskError, match="outside the vocabulary"):
        Vocabulary.from_token_bytes([b"a"], special_ids=[5])


def test_a_raw_tokenizers_backend_gives_the_same_bytes() -> None:
    tokenizer, vocab = tokenizer_and_vocab("qwen3")
    raw = Vocabulary.from_tokenizer(tokenizer.backend_tokenizer)
    assert raw.token_bytes == vocab.token_bytes
    assert raw.eos_token_id is None


def test_a_tokenizer_without_a_rust_backend_is_a_clear_error() -> None:
    with pytest.raises(CodemaskError, match="fast tokenizer"):
        Vocabulary.from_tokenizer(object())
