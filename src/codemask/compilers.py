"""One `GrammarCompiler` per (tokenizer, model vocabulary, stop tokens), shared by every entry point.

Reading a tokenizer's vocabulary takes a noticeable fraction of a second on a 150k vocabulary and
compiled grammars are cached per compiler, so `constrained_generate`, the Hugging Face processors,
the server and the CLI all go through :func:`compiler_for` rather than building their own. The
registry keeps the `MAX_COMPILERS` most recently used, and never one for a tokenizer that is gone
(it holds tokenizers weakly where they allow it), so a process that loads tokenizers one after
another does not keep every vocabulary it ever read.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from codemask.engine.compiler import GrammarCompiler
from codemask.vocab import Vocabulary

MAX_COMPILERS = 8
_LOCK = threading.Lock()
# key -> (a reference to the tokenizer, so that its id is not reused while the entry lives; the compiler)
_COMPILERS: OrderedDict[tuple[int, int | None, frozenset[int]], tuple[Any, GrammarCompiler]] = OrderedDict()


def _reference(tokenizer: Any) -> Any:
    """A weak reference where the tokenizer allows one (its entry then dies with it), else the object."""
    try:
        return weakref.ref(tokenizer)
    except TypeError:
        return lambda: tokenizer


def compiler_for(tokenizer: Any, vocab_size: int | None = None, extra_stop_ids: Iterable[int] = ()) -> GrammarCompiler:
    """The shared compiler for ``tokenizer``, masks ``vocab_size`` wide, stopping also on ``extra_stop_ids``."""
    extra = frozenset(int(i) for i in extra_stop_ids)
    key = (id(tokenizer), vocab_size, extra)
    with _LOCK:
        for stale in [k for k, (ref, _) in _COMPILERS.items() if ref() is None]:
            del _COMPILERS[stale]
        found = _COMPILERS.get(key)
        if found is not None and found[0]() is tokenizer:
            _COMPILERS.move_to_end(key)
            return found[1]
        vocab = Vocabulary.from_tokenizer(tokenizer, vocab_size=vocab_size)
        if not extra <= vocab.stop_token_ids:
            vocab = Vocabulary.from_tokenizer(tokenizer, vocab_size=vocab_size,
                                              stop_token_ids=vocab.stop_token_ids | extra)
        compiler = GrammarCompiler(vocab)
        _COMPILERS[key] = (_reference(tokenizer), compiler)
        while len(_COMPILERS) > MAX_COMPILERS:
            _COMPILERS.popitem(last=False)
        return compiler


def model_stop_token_ids(model: Any) -> list[int]:
    """The end-of-sequence ids a model's generation config declares (an int, a list, or nothing)."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(i) for i in eos]


def ordered_stop_token_ids(stop_token_ids: Iterable[int], model: Any = None,
                           eos_token_id: int | None = None) -> list[int]:
    """``stop_token_ids`` sorted, the model's own end-of-sequence ids first (else the tokenizer's ``eos_token_id``).

    Where one token must stand for "end here" (RPG's transfer to end-of-sequence), it should be the
    one Hugging Face ``generate`` stops at: the generation config's, not another id the vocabulary
    also counts as a stop (SmolLM2's config stops at id 2; its ``<|endoftext|>``, id 0, is a stop too).
    """
    stops = sorted(set(stop_token_ids))
    first = model_stop_token_ids(model) if model is not None else []
    if not first and eos_token_id is not None:
        first = [eos_token_id]
    first = [t for t in first if t in stops]
    return first + [t for t in stops if t not in first]


def model_vocab_size(model: Any) -> int | None:
    """The width of a model's logits, when it says."""
    embeddings = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(embeddings, "weight", None)
    if weight is not None:
        return int(weight.shape[0])
    return getattr(getattr(model, "config", None), "vocab_size", None)
