"""FIM prompts: the format found from a real tokenizer's vocabulary, and a prompt a client already
wrote in that format split back into the code before and after the cursor."""

from __future__ import annotations

from codemask.assets import load_tokenizer
from codemask.server.fim import completion_prompt, fim_format


def test_qwen_coder_has_its_fim_format_and_smollm2_none() -> None:
    qwen = fim_format(load_tokenizer("qwen-coder"))
    assert qwen is not None and (qwen.prefix, qwen.suffix, qwen.middle) == (
        "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
    smollm2 = load_tokenizer("smollm2")
    assert fim_format(smollm2) is None
    assert completion_prompt(smollm2, "x = ", "\n") == "x = "  # the code before the cursor alone


def test_a_prompt_written_in_the_format_splits_into_prefix_and_suffix() -> None:
    tokenizer = load_tokenizer("qwen-coder")
    form = fim_format(tokenizer)
    assert form is not None
    prefix, suffix = "def f(a):\n    return ", "\nprint(f(1))\n"
    assert form.split(completion_prompt(tokenizer, prefix, suffix)) == (prefix, suffix)
    assert form.split(f"<|file_sep|>a.py\nx = 1\n{form.prefix}{prefix}{form.suffix}{suffix}{form.middle}") == (
        prefix, suffix)
    assert form.split(prefix) is None  # plain code
    assert form.split(f"{form.prefix}{prefix}{form.middle}") is None  # no suffix token: not this format
