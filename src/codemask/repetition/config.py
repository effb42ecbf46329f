"""`RPG`: what a user sets to penalise repetition (``constrained_generate(..., repetition=RPG())``)."""

from __future__ import annotations

from dataclasses import dataclass

from codemask.repetition.units import language_spec


@dataclass(frozen=True)
class RPG:
    """Repetition penalization based on grammar (Dong et al., ACL 2025).

    When the code ends with ``count + 1`` back-to-back copies of a span of statement units, the token
    that began the last copy — the one that would begin the next — has its probability multiplied by
    ``penalty ** count`` at the point where the next copy would start; where that point begins a new
    statement and the code so far is complete, end-of-sequence is multiplied by ``eos_boost ** count``
    and, with ``eos_transfer``, also receives the probability the decay took from the critical token:
    ``p(eos) += p(critical) · (1 - penalty ** g)``, ``g`` the copies the model wrote itself (at most
    ``count``: a prompt that repeats itself is decayed, not ended), so the model's wish to write another
    copy becomes, in proportion to how often it has repeated itself, a wish to stop. The transfer needs
    no scale of its own (where every copy was generated it moves exactly the mass the decay removes): at
    the paper's λ = 0.9 ending overtakes the next copy once a confident loop's span has been repeated
    seven times (0.9^7 < 1/2), where the multiplicative boost alone could not lift end-of-sequence from
    the −18 nats at which a small code model puts it after complete code. A definition the model writes
    under a name its block already defines (a function written again: dead code, the first definition
    replaced — pyflakes' F811) is a repeat whatever its statements: at the next statement beside it the
    token that began it is decayed with ``count`` its generated tokens, as in a verbatim loop, and where
    the code could end gives that share to end-of-sequence (decorated definitions such as ``@overload``
    and Go's ``init`` may repeat and are left alone). With ``content=True`` the same
    decay applies to back-to-back repeats of the generated token ids themselves (content repetition: the
    same text again), for spans of at most ``max_period`` tokens covering at least
    ``min_content_tokens`` tokens; there ``count`` is in tokens: how many tokens in a row repeat the
    span (each token of a verbatim loop is one more repetition), or, if more, the span's length times
    its earlier occurrences in the generated tokens, adjacent or not (a loop that strays for a token and
    resumes keeps its count). Counted in copies, a confident small model's loop needs tens of copies
    before the decayed token loses the argmax.

    Attributes:
        penalty: λ, the decay per repetition (0 < λ <= 1; the paper's 0.9).
        eos_boost: factor per repetition on end-of-sequence (>= 1; 1 disables it).
        eos_transfer: move the critical token's decayed probability to end-of-sequence where the code
            could end (never to a stop token a grammar forbids).
        language: the language of the generated code: ``"python"`` or ``"go"``.
        content: also decay token-level content repeats.
        max_period: longest repeated span, in tokens, the content detector looks for.
        min_content_tokens: a content repeat must cover at least this many tokens (copies × period)
            before it is penalised, so that ``))`` or two indentation tokens are left alone.
        copied_docstring: a Python function or class whose docstring (three lines or more) is at least
            this alike to the docstring of the definition before it in its block (word-level difflib ratio,
            own names blanked out: :mod:`codemask.repetition.likeness`) counts as a redefinition — a model
            writing function after function to one template, each new but each docstring a near copy of the
            last. As for a redefinition, only the tokens the model wrote count: a copy the prompt holds
            entirely is left alone, and where the prompt ends inside one, the tokens that finish it count. In
            Python's standard library 3% of consecutive functions with such docstrings are 0.9 alike, in the
            loops RPG otherwise leaves unended 81% (``benchmarks/definition_similarity.py``); a real
            completion that writes such a pair ends after it. None switches the rule off.
    """

    penalty: float = 0.9
    eos_boost: float = 1.25
    eos_transfer: bool = True
    language: str = "python"
    content: bool = True
    max_period: int = 256
    min_content_tokens: int = 4
    copied_docstring: float | None = 0.9

    def __post_init__(self) -> None:
        if not 0.0 < self.penalty <= 1.0:
            raise ValueError(f"penalty must be in (0, 1], got {self.penalty}")
        if self.eos_boost < 1.0:
            raise ValueError(f"eos_boost must be >= 1, got {self.eos_boost}")
        if self.copied_docstring is not None and not 0.0 < self.copied_docstring <= 1.0:
            raise ValueError(f"copied_docstring must be in (0, 1] or None, got {self.copied_docstring}")
        if self.max_period < 1 or self.min_content_tokens < 2:
            raise ValueError("max_period must be >= 1 and min_content_tokens >= 2")
        language_spec(self.language)  # fails early for an unsupported language
