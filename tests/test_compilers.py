"""The stop-token order RPG's transfer to end-of-sequence relies on, with the packaged models' configs."""

from __future__ import annotations

from types import SimpleNamespace

from transformers import GenerationConfig

from codemask.assets import load_tokenizer, model_dir
from codemask.compilers import compiler_for, model_stop_token_ids, ordered_stop_token_ids


def test_the_model_s_own_end_of_sequence_comes_first() -> None:
    model = SimpleNamespace(generation_config=GenerationConfig.from_pretrained(model_dir("smollm2")))
    vocab = compiler_for(load_tokenizer("smollm2"), None, model_stop_token_ids(model)).vocab
    assert sorted(vocab.stop_token_ids) == [0, 2]  # <|endoftext|> and <|im_end|>
    assert ordered_stop_token_ids(vocab.stop_token_ids, model) == [2, 0]  # generate() stops at 2 only
    assert ordered_stop_token_ids([5, 0, 2], None, eos_token_id=5) == [5, 0, 2]  # no model: the tokenizer's EOS
    assert ordered_stop_token_ids([5, 0, 2], None, eos_token_id=7) == [0, 2, 5]  # an EOS that is no stop: sorted


def test_the_registry_is_bounded_and_forgets_tokenizers_that_are_gone() -> None:
    """A process that loads tokenizer after tokenizer keeps at most MAX_COMPILERS vocabularies, and
    none of a tokenizer it dropped; the same tokenizer gets the same compiler back."""
    import gc

    from codemask import compilers

    tokenizer = load_tokenizer("gpt2")
    first = compiler_for(tokenizer)
    assert compiler_for(tokenizer) is first
    for width in range(compilers.MAX_COMPILERS + 2):
        compiler_for(tokenizer, 50257 + width)
    assert len(compilers._COMPILERS) <= compilers.MAX_COMPILERS
    assert compiler_for(tokenizer) is not first  # evicted, least recently used
    dropped = load_tokenizer("gpt2")
    assert dropped is not tokenizer
    compiler_for(dropped, 50300)
    gone = id(dropped)
    assert any(key[0] == gone for key in compilers._COMPILERS)
    del dropped
    gc.collect()
    compiler_for(tokenizer)
    assert not any(key[0] == gone and ref() is not None for key, (ref, _) in compilers._COMPILERS.items())
