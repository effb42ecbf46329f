"""The request bodies ``codemask serve`` takes: OpenAI's completions and chat, llama.cpp's ``/infill``,
each with codemask's own fields (what constrains the output and which stages decode it)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class CodemaskFields(BaseModel):
    """What codemask adds to a request: a grammar (a builtin name, EBNF/GBNF or Lark text), a JSON
    Schema or a regex; or ``language`` (a code grammar with the suffix as its right context) with
    ``until``; RPG (``repetition``), AdaDec (``uncertainty``), speculative verification
    (``speculative``), monitors over ``workspace`` for ``path``; vLLM's ``ignore_eos``."""

    model_config = ConfigDict(extra="ignore")

    grammar: str | None = None
    json_schema: dict[str, Any] | bool | None = None
    regex: str | None = None
    language: str | None = None
    until: Literal["line", "statement", "block", "function"] | None = None
    repetition: bool = True
    uncertainty: bool = False
    speculative: bool = False
    workspace: str | None = None
    path: str | None = None
    ignore_eos: bool = False


class Sampled(BaseModel):
    """OpenAI's sampling fields, with its defaults (temperature 1)."""

    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = Field(default=1, ge=1, le=16)

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if any(not s for s in stops):
            raise ValueError("stop strings must be non-empty")
        return value


class CompletionRequest(Sampled, CodemaskFields):
    """``POST /v1/completions``: ``prompt`` (the code before the cursor) and ``suffix`` (after it)."""

    model: str | None = None
    prompt: str | list[str]
    suffix: str | None = None
    max_tokens: int | None = Field(default=16, ge=1)

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("one prompt per request (a list of exactly one string is taken too)")
        return value

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatRequest(Sampled, CodemaskFields):
    """``POST /v1/chat/completions``: ``messages`` with ``response_format`` and ``tools``."""

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)


class ExtraFile(BaseModel):
    filename: str = ""
    text: str = ""


class InfillRequest(CodemaskFields):
    """``POST /infill`` as llama.cpp's server takes it (llama.vim's client)."""

    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: list[ExtraFile] = Field(default_factory=list)
    prompt: str = ""  # text after the prefix, before the cursor (llama.cpp: the current line's start)
    n_predict: int = Field(default=128, ge=0)  # 0: nothing written (llama.vim's requests that only bring context)
    temperature: float = Field(default=0.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stream: bool = False
