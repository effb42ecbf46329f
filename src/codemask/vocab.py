"""The exact bytes each token id contributes to a decoded text, for any Hugging Face tokenizer.

Grammars are over bytes, so the engine can only decide whether a token may come next if it knows
the token's bytes *as they appear in the middle of a text*. Tokenizers do not store that: byte-level
BPE (GPT-2, Llama-3, Qwen, SmolLM2, DeepSeek) spells bytes in GPT-2's byte-to-unicode alphabet
(``Ġ`` is a space), SentencePiece spells a space ``▁`` and a raw byte ``<0x0A>``, and
``tokenizer.decode([id])`` is no help either: it turns half of a multi-byte character into U+FFFD
and strips the leading space of the first token. So the bytes are rebuilt here from the token
strings and from the backend's own description of its decoder, never from the model's name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from codemask.errors import CodemaskError

# Special tokens that end a turn or a document in common chat models. When the caller names no stop
# tokens, any of these that the tokenizer marks special stops generation like EOS does: a model
# fine-tuned for chat ends its answer with ``<|im_end|>`` even when its EOS is ``<|endoftext|>``.
DEFAULT_STOP_TOKENS = frozenset(
    {
        "<|endoftext|>",
        "<|im_end|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|end_of_text|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<end_of_turn>",
        "<eos>",
        "</s>",
        "<｜end▁of▁sentence｜>",
    }
)

TokenDecoder = Callable[[str], bytes]


class Vocabulary:
    """Token id → bytes, plus which ids are special, which stop generation, and the mask width.

    Attributes:
        vocab_size: width of token masks: the larger of the tokenizer's highest id + 1 and the
            model's vocabulary size (models often pad their embedding matrix).
        token_bytes: per id, the bytes the token contributes to the text; ``b""`` for special
            tokens and unused ids.
        special_ids: ids a grammar must never allow: special/control tokens, stop tokens, unused
            ids (gaps in the id range, model padding) and tokens with no bytes (they could be
            generated forever without advancing the grammar).
        eos_token_id: the tokenizer's end-of-sequence id, if it has one.
        stop_token_ids: ids that end generation: EOS plus the configured stop tokens. The engine
            allows them only where the grammar may end.
        fingerprint: sha256 over everything above; keys the compiled-grammar cache.
    """

    vocab_size: int
    token_bytes: list[bytes]
    special_ids: frozenset[int]
    eos_token_id: int | None
    stop_token_ids: frozenset[int]
    fingerprint: str

    def __init__(
        self,
        token_bytes: Sequence[bytes],
        *,
        special_ids: Iterable[int] = (),
        eos_token_id: int | None = None,
        stop_token_ids: Iterable[int] = (),
        vocab_size: int | None = None,
    ) -> None:
        size = max(len(token_bytes), vocab_size or 0)
        stops = set(stop_token_ids)
        if eos_token_id is not None:
            stops.add(eos_token_id)
        declared_special = stops.union(special_ids)
        out_of_range = sorted(i for i in declared_special if not 0 <= i < size)
        if out_of_range:
            raise CodemaskError(f"token ids {out_of_range[:5]} are outside the vocabulary of size {size}")

        table = list(token_bytes)
        table.extend([b""] * (size - len(table)))
        for i in declared_special:
            table[i] = b""
        lengths = np.fromiter(map(len, table), dtype=np.int64, count=size)
        # Stop ids are special too: a stop token is the end of the output, never text inside it.
        special = frozenset(np.flatnonzero(lengths == 0).tolist())

        self.vocab_size = size
        self.token_bytes = table
        self.special_ids = special
        self.eos_token_id = eos_token_id
        self.stop_token_ids = frozenset(stops)
        self.fingerprint = _fingerprint(table, lengths, special, self.stop_token_ids, eos_token_id)

    @classmethod
    def from_token_bytes(
        cls,
        token_bytes: Sequence[bytes],
        *,
        eos_token_id: int | None = None,
        special_ids: Iterable[int] = (),
        stop_token_ids: Iterable[int] | None = None,
        vocab_size: int | None = None,
    ) -> Vocabulary:
        """Build a vocabulary from bytes given directly (tests, non-Hugging-Face integrations)."""
        return cls(
            token_bytes,
            special_ids=special_ids,
            eos_token_id=eos_token_id,
            stop_token_ids=stop_token_ids or (),
            vocab_size=vocab_size,
        )

    @classmethod
    def from_tokenizer(
        cls,
        tokenizer: Any,
        vocab_size: int | None = None,
        stop_token_ids: Iterable[int] | None = None,
    ) -> Vocabulary:
        """Read the token bytes of a Hugging Face tokenizer (or a raw ``tokenizers.Tokenizer``).

        ``vocab_size`` is the model's vocabulary size (``model.config.vocab_size``) when it is larger
        than the tokenizer's; the extra ids are special. ``stop_token_ids`` replaces the default
        stop tokens (the special tokens in :data:`DEFAULT_STOP_TOKENS`); EOS always stops.
        """
        backend = _backend_of(tokenizer)
        decode_token, text_added_tokens = _token_decoder(backend)
        model_vocab: dict[str, int] = backend.get_vocab(with_added_tokens=False)
        added = backend.get_added_tokens_decoder()

        size = max(max(model_vocab.values(), default=-1), max(added, default=-1)) + 1
        table = [b""] * size
        for token, i in model_vocab.items():
            # llama.cpp pads a GGUF vocabulary to the embedding size with tokens named [PAD<id>]:
            # BPE never produces them, they are not text.
            if not (token.startswith("[PAD") and token == f"[PAD{i}]"):
                table[i] = decode_token(token)

        special = {i for i in _ids_of_special_tokens(tokenizer) if i < size}
        named_stops: set[int] = set()
        for i, token in added.items():
            if token.special:
                special.add(i)
                if token.content in DEFAULT_STOP_TOKENS:
                    named_stops.add(i)
            else:
                # An added token is matched in the raw text before the model runs, so it stands for
                # its content; SentencePiece spells spaces in it as ▁ like in the model's pieces.
                table[i] = token.content.encode() if text_added_tokens else decode_token(token.content)

        eos = getattr(tokenizer, "eos_token_id", None)
        return cls(
            table,
            special_ids=special,
            eos_token_id=eos,
            stop_token_ids=named_stops if stop_token_ids is None else stop_token_ids,
            vocab_size=vocab_size,
        )

    def decode(self, ids: Iterable[int]) -> bytes:
        """The bytes of a token sequence: what the tokenizer's decode gives, before it cleans up."""
        table = self.token_bytes
        return b"".join([table[i] for i in ids])

    def __repr__(self) -> str:
        return (
            f"Vocabulary(vocab_size={self.vocab_size}, special={len(self.special_ids)}, "
            f"eos={self.eos_token_id}, stops={sorted(self.stop_token_ids)}, fingerprint={self.fingerprint[:12]})"
        )


def _backend_of(tokenizer: Any) -> Any:
    """The Rust ``tokenizers.Tokenizer`` behind a Hugging Face tokenizer (or the tokenizer itself)."""
    backend = getattr(tokenizer, "backend_tokenizer", tokenizer)
    if not hasattr(backend, "get_added_tokens_decoder") or not hasattr(backend, "decoder"):
        raise CodemaskError(
            f"{type(tokenizer).__name__} has no Rust backend (tokenizer.json); codemask needs a fast "
            "tokenizer: load it with AutoTokenizer.from_pretrained(..., use_fast=True)"
        )
    return backend


def _ids_of_special_tokens(tokenizer: Any) -> list[int]:
    """Ids transformers treats as special (bos, eos, unk, pad, additional ones) besides the backend's."""
    ids = getattr(tokenizer, "all_special_ids", None) or []
    return [i for i in ids if isinstance(i, int)]


def _token_decoder(backend: Any) -> tuple[TokenDecoder, bool]:
    """How a token string becomes bytes, from the backend's decoder and model settings.

    Returns the decoding function and whether added tokens stand for their content as is (byte-level
    tokenizers, whose added tokens are not written in the byte alphabet).
    """
    decoder_state = json.loads(backend.decoder.__getstate__()) if backend.decoder is not None else None
    parts = _flatten_decoders(decoder_state)
    types = [part["type"] for part in parts]
    if "ByteLevel" in types or (decoder_state is None and _has_byte_level_pre_tokenizer(backend)):
        return _byte_level_decoder(), True

    unsupported = sorted(set(types) - {"Replace", "Metaspace", "ByteFallback", "Fuse", "Strip"})
    if unsupported or decoder_state is None:
        raise CodemaskError(
            f"unsupported tokenizer decoder {unsupported or 'None'}: codemask reads byte-level BPE and "
            "SentencePiece-style (▁, <0xNN> byte fallback) tokenizers"
        )
    replacements = [_replacement(part) for part in parts if part["type"] in ("Replace", "Metaspace")]
    byte_fallback = "ByteFallback" in types or bool(getattr(backend.model, "byte_fallback", False))
    return _piece_decoder(replacements, byte_fallback), False


def _flatten_decoders(state: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if state is None:
        return []
    if state["type"] == "Sequence":
        return [part for inner in state["decoders"] for part in _flatten_decoders(inner)]
    return [state]


def _has_byte_level_pre_tokenizer(backend: Any) -> bool:
    if backend.pre_tokenizer is None:
        return False
    return '"ByteLevel"' in backend.pre_tokenizer.__getstate__().decode()


def _replacement(part: Mapping[str, Any]) -> tuple[str, str]:
    """The (old, new) string replacement a Replace or Metaspace decoder applies to each token.

    A Metaspace decoder also drops the space it put before the first word; that happens once per
    decoded text, not per token, so it is not part of a token's bytes.
    """
    if part["type"] == "Metaspace":
        return part["replacement"], " "
    pattern = part["pattern"]
    if "String" not in pattern:
        raise CodemaskError(f"unsupported Replace decoder with a regex pattern: {pattern}")
    return pattern["String"], part["content"]


def _gpt2_bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the alphabet of byte-level BPE).

    Printable Latin-1 bytes stand for themselves; the others (controls, space, 0x7F-0xA0, 0xAD)
    take the code points from U+0100 upwards, in byte order.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shifted)
            shifted += 1
    return mapping


def _byte_level_decoder() -> TokenDecoder:
    """Byte-level BPE: map each character back to its byte through a ``str.translate`` table.

    Characters outside the alphabet make Latin-1 encoding fail on purpose (they are sent to a code
    point above 255); such a token is kept as its UTF-8 text, as the ByteLevel decoder does.
    """
    table: dict[int, int] = {ord(char): byte for byte, char in _gpt2_bytes_to_unicode().items()}
    for code in range(256):
        table.setdefault(code, 0x2400)

    def decode(token: str) -> bytes:
        try:
            return token.translate(table).encode("latin-1")
        except UnicodeEncodeError:
            return token.encode()

    return decode


def _piece_decoder(replacements: Sequence[tuple[str, str]], byte_fallback: bool) -> TokenDecoder:
    """SentencePiece-style pieces: ``<0xNN>`` is one raw byte (with byte fallback), ▁ is a space."""
    byte_pieces = {f"<0x{b:02X}>": bytes([b]) for b in range(256)} if byte_fallback else {}

    def decode(token: str) -> bytes:
        raw = byte_pieces.get(token)
        if raw is not None:
            return raw
        for old, new in replacements:
            token = token.replace(old, new)
        return token.encode()

    return decode


def _fingerprint(
    table: Sequence[bytes],
    lengths: np.ndarray,
    special: frozenset[int],
    stops: frozenset[int],
    eos: int | None,
) -> str:
    digest = hashlib.sha256(b"codemask-vocabulary-v1")
    digest.update(np.array([len(table), -1 if eos is None else eos], dtype="<i8").tobytes())
    digest.update(lengths.astype("<i8").tobytes())
    digest.update(b"".join(table))
    for ids in (special, stops):
        digest.update(np.array(sorted(ids), dtype="<i8").tobytes())
        digest.update(b"|")
    return digest.hexdigest()
