"""CodeRepetEval's metrics (Dong et al., ACL 2025): how much generated code repeats itself, whether it ends.

Pure functions over outputs, so that any generator's results can be scored alike:

- **TR-N** (:func:`tr_n`): the share of n-grams (n = 4 by default) of a sequence that already
  occurred earlier in it. Over the code's grammar tokens (:func:`grammar_tokens`, the leaves of its
  tree-sitter parse: keywords, names, literals, punctuation — the paper uses Python's tokenizer
  for the same) or over its statement units (:func:`unit_labels`, the sequence RPG watches).
- **TR-S** (:func:`tr_s`): the share of lines that repeat an earlier line (trailing whitespace
  ignored; blank lines count, so a run of empty lines is repetition). The paper's released script
  (``metric/utils/evaluation.py``, ``sentence_repetition_count``) counts blank lines too and averages
  per sample, but over prompt + sample; here it is the text given, the completion alone, since
  CodeRepetEval's prompts repeat themselves (43% of their lines on ``repetition_eval``'s 12 prompts;
  its tables give the figure) and would set a floor that no decoding could go below.
- **EGP** (:func:`egp`): the share of samples that ended by themselves — the model emitted
  end-of-sequence (finish reason ``"stop"`` or ``"grammar_end"``) — rather than at the length limit.
- **CCP** (:func:`ccp`, :func:`compiles`): the share of programs (prompt + completion) that compile;
  :func:`code_part` cuts a completion where the model leaves code for Markdown prose.

Each function takes one sample; :func:`mean` averages over a set (TR-N and TR-S are averaged per
sample, as the paper's TR-S is).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import tree_sitter

from codemask.repetition.units import statement_units, ts_language

ENDED_REASONS = frozenset({"stop", "grammar_end"})


def tr_n(sequence: Sequence[Hashable], n: int = 4) -> float:
    """Share of the ``n``-grams of ``sequence`` that occurred earlier in it (0 when it has none)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    total = len(sequence) - n + 1
    if total <= 0:
        return 0.0
    seen: set[tuple[Hashable, ...]] = set()
    repeated = 0
    for i in range(total):
        gram = tuple(sequence[i: i + n])
        repeated += gram in seen
        seen.add(gram)
    return repeated / total


def tr_s(text: str) -> float:
    """Share of the lines of ``text`` that repeat an earlier line (0 for an empty text)."""
    lines = [line.rstrip() for line in text.split("\n")]
    if text.endswith("\n"):
        lines.pop()  # the empty string after the final newline is no line
    if not lines:
        return 0.0
    return (len(lines) - len(set(lines))) / len(lines)


def grammar_tokens(code: str, language: str = "python") -> list[str]:
    """The text of each leaf of ``code``'s tree-sitter parse, in order (comments and strings are one leaf each)."""
    data = code.encode("utf-8")
    tree = tree_sitter.Parser(ts_language(language)).parse(data)
    leaves: list[str] = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type in ("comment", "string") or not node.child_count:
            if node.end_byte > node.start_byte:
                leaves.append(data[node.start_byte: node.end_byte].decode("utf-8", errors="replace"))
            continue
        stack.extend(reversed(node.children))
    return leaves


def unit_labels(code: str, language: str = "python") -> list[str]:
    """The statement-unit labels of ``code`` (what RPG's structural detector sees)."""
    return [unit.label for unit in statement_units(code, language)]


def compiles(code: str, language: str = "python") -> bool:
    """Whether ``code`` compiles: Python's ``compile``; other languages: a tree-sitter parse without errors."""
    if language == "python":
        try:
            compile(code, "<generated>", "exec")
        except (SyntaxError, ValueError):
            return False
        return True
    return not tree_sitter.Parser(ts_language(language)).parse(code.encode("utf-8")).root_node.has_error


def code_part(completion: str) -> str:
    """``completion`` up to the first line that is a Markdown code fence (```` ``` ````, ```` ```python ````).

    Chat-tuned code models close the code block they believe they are in and explain the code in prose
    (Qwen2.5-Coder after a complete function); that prose is no part of the program. Harnesses that
    score such answers (EvalPlus's sanitiser, for one) read the code the same way.
    """
    offset = 0
    for line in completion.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            return completion[:offset]
        offset += len(line)
    return completion


def egp(finish_reasons: Iterable[str]) -> float:
    """End-of-generation percentage (as a fraction): the share of samples that ended by end-of-sequence."""
    reasons = list(finish_reasons)
    return sum(r in ENDED_REASONS for r in reasons) / len(reasons) if reasons else 0.0


def ccp(programs: Iterable[str], language: str = "python") -> float:
    """Compile correctness percentage (as a fraction): the share of ``programs`` that compile."""
    results = [compiles(p, language) for p in programs]
    return sum(results) / len(results) if results else 0.0


def mean(values: Iterable[float]) -> float:
    """The average of per-sample values (0 for none)."""
    items = list(values)
    return sum(items) / len(items) if items else 0.0
