"""Fill-in-the-middle prompts: each model's own format, or the prefix alone for a model without one.

A code model trained for FIM sees the text before and after the cursor in its special tokens and
writes the middle: Qwen2.5-Coder (and StarCoder 2) take ``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``,
StarCoder ``<fim_prefix>…<fim_suffix>…<fim_middle>``, Code Llama ``<PRE> … <SUF>…<MID>``. Other files
of the project (llama.cpp's ``input_extra``) go before it as ``<|file_sep|>`` sections where the
model has that token. A model without FIM tokens gets the prefix alone; the suffix then still
constrains where the completion may end (the grammar's suffix check), it just is not shown to the model.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FimFormat:
    """The special tokens of one FIM format (``file_sep`` optional)."""

    prefix: str
    suffix: str
    middle: str
    file_sep: str | None = None

    def prompt(self, prefix: str, suffix: str, extra: Sequence[tuple[str, str]] = ()) -> str:
        files = "".join(f"{self.file_sep}{name}\n{text}\n" for name, text in extra) if self.file_sep else ""
        return f"{files}{self.prefix}{prefix}{self.suffix}{suffix}{self.middle}"


    def split(self, text: str) -> tuple[str, str] | None:
        """The code before and after the cursor in a prompt that a client rendered in this format
        itself (Continue does, for the models it knows), or None when ``text`` is not one: it must end
        with the middle token, after the prefix and suffix tokens in that order."""
        if not text.endswith(self.middle):
            return None
        _, found, rest = text[: -len(self.middle)].rpartition(self.prefix)
        prefix, marked, suffix = rest.partition(self.suffix)
        return (prefix, suffix) if found and marked else None


FORMATS = (
    FimFormat("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|file_sep|>"),
    FimFormat("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>"),
    FimFormat("<PRE> ", " <SUF>", " <MID>"),
)


@functools.lru_cache(maxsize=8)
def fim_format(tokenizer: Any) -> FimFormat | None:
    """The FIM format whose tokens the tokenizer has as single tokens, or None (found once per
    tokenizer: reading a 150k vocabulary takes a tenth of a second, on every request otherwise)."""
    vocab = tokenizer.get_vocab()
    for form in FORMATS:
        if all(token.strip() in vocab for token in (form.prefix, form.suffix, form.middle)):
            if form.file_sep is not None and form.file_sep not in vocab:
                return FimFormat(form.prefix, form.suffix, form.middle)
            return form
    return None


def completion_prompt(tokenizer: Any, prefix: str, suffix: str | None,
                      extra: Sequence[tuple[str, str]] = ()) -> str:
    """What the model is fed for a completion at a cursor: its FIM format when it has one and there is
    a suffix or other files, else the other files' text and the prefix."""
    form = fim_format(tokenizer)
    if form is not None and (suffix is not None or extra):
        return form.prompt(prefix, suffix or "", extra)
    files = "".join(f"# {name}\n{text}\n" for name, text in extra)
    return files + prefix
