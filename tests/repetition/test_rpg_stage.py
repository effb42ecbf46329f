"""RPG's decision per step on a real tokenizer, and the stage's arithmetic on the logits."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import pytest
import torch

from codemask import RPG
from codemask.assets import load_tokenizer
from codemask.decoding.pipeline import StepLayout
from codemask.repetition import Penalties, RepetitionStage, RepetitionState, apply_penalties_
from codemask.repetition.likeness import likeness, words
from codemask.vocab import Vocabulary

CODE = "def test_add():\n    assert add(1, 2) == 3\n    assert add(2, 3) == 5\n    assert add(3, 4) == 7\n"
NEXT = "    assert add(4, 5) == 9\n"


@pytest.fixture(scope="module")
def smollm2() -> tuple[object, Vocabulary]:
    tokenizer = load_tokenizer("smollm2")
    return tokenizer, Vocabulary.from_tokenizer(tokenizer)


def _walk(tokenizer: object, vocab: Vocabulary, rpg: RPG) -> tuple[list[int], list[Penalties]]:
    """Feed CODE + NEXT token by token (as the model would emit them); the penalties before each token."""
    ids = tokenizer.encode(CODE + NEXT, add_special_tokens=False)  # type: ignore[attr-defined]
    prefix = 0  # the prompt ends inside the third assert, the rest comes one token per step
    while len(vocab.decode(ids[: prefix + 1])) < len(CODE) - 5:
        prefix += 1
    state = RepetitionState(rpg, vocab.token_bytes, ids[:prefix])
    seen = []
    for token in ids[prefix:]:
        seen.append(state.penalties())
        state.append([token])
    return ids[prefix:], seen


def _up_to_statement(tokenizer: Any, vocab: Vocabulary, code: str, statement: str) -> list[int]:
    """The tokens of ``code + statement`` before the one that holds the statement's first character."""
    ids = tokenizer.encode(code + statement, add_special_tokens=False)
    start = len((code + statement[: len(statement) - len(statement.lstrip())]).encode())
    count = 0
    while len(vocab.decode(ids[: count + 1])) <= start:
        count += 1
    return ids[:count]


def test_the_token_that_starts_the_next_copy_is_decayed_once_at_the_statement_start(smollm2) -> None:
    tokenizer, vocab = smollm2
    tokens, seen = _walk(tokenizer, vocab, RPG(content=False))
    starts = [i for i, t in enumerate(tokens) if b"assert" in vocab.token_bytes[t]]
    assert len(starts) == 1
    critical = starts[0]
    # three asserts in a row: the span [assert_statement] repeated twice after its first occurrence
    assert seen[critical].decay == {tokens[critical]: 2}
    assert seen[critical].eos == 2  # the code so far is complete: ending here is allowed and boosted
    for i, penalties in enumerate(seen):
        if i != critical:
            assert not penalties, (i, penalties)  # mid-line, or before the indentation is typed


def test_no_eos_boost_where_the_code_could_not_end(smollm2) -> None:
    tokenizer, vocab = smollm2
    ids = _up_to_statement(tokenizer, vocab, "for i in x:\n    print(i)\n    print(i)\n    print(i)\n", "    print(i)")
    penalties = RepetitionState(RPG(content=False), vocab.token_bytes, ids).penalties()
    assert list(penalties.decay.values()) == [2] and penalties.eos == 2  # the loop body is complete
    unclosed = "xs = [\n    f(1),\n    f(2),\n    f(3),\n    "
    ids = tokenizer.encode(unclosed, add_special_tokens=False)
    assert not RepetitionState(RPG(content=False), vocab.token_bytes, ids).penalties()  # no statement ends there


def test_content_repetition_of_tokens(smollm2) -> None:
    tokenizer, vocab = smollm2
    ids = tokenizer.encode("x = 1", add_special_tokens=False)
    newline = tokenizer.convert_tokens_to_ids("Ċ")
    state = RepetitionState(RPG(), vocab.token_bytes, ids + [newline] * 6)
    assert state.penalties().decay == {newline: 5}
    assert not RepetitionState(RPG(content=False), vocab.token_bytes, ids + [newline] * 6).penalties().decay
    short = RepetitionState(RPG(), vocab.token_bytes, ids + [newline] * 3)  # covers 3 < min_content_tokens tokens
    assert not short.penalties().decay


def test_a_content_loop_that_strays_for_a_token_keeps_its_count(smollm2) -> None:
    """Back-to-back copies restart at one after a stray token; the decay counts the tokens of every
    generated copy after the first."""
    tokenizer, vocab = smollm2
    prompt = tokenizer.encode("x = 1\n", add_special_tokens=False)
    copy = tokenizer.encode("print(f(1))\n", add_special_tokens=False)
    stray = tokenizer.encode("#", add_special_tokens=False)
    state = RepetitionState(RPG(), vocab.token_bytes, prompt)
    state.append(copy * 4 + stray + copy * 2)
    assert state.penalties().decay == {copy[0]: 5 * len(copy)}  # six copies generated; two of them back to back
    fresh = RepetitionState(RPG(), vocab.token_bytes, prompt + copy * 4 + stray + copy * 2)
    assert fresh.penalties().decay == {copy[0]: len(copy)}  # copies in the prompt count only back to back


def test_rollback_and_fork_give_the_same_penalties(smollm2) -> None:
    tokenizer, vocab = smollm2
    tokens, seen = _walk(tokenizer, vocab, RPG())
    ids = tokenizer.encode(CODE + NEXT, add_special_tokens=False)
    state = RepetitionState(RPG(), vocab.token_bytes, ids)
    fork = state.fork()
    state.rollback(len(tokens))
    for token, expected in zip(tokens, seen, strict=True):
        assert state.penalties() == expected
        state.append([token])
    assert fork.penalties() == state.penalties()


def test_penalty_is_on_probabilities_and_keeps_masks() -> None:
    rpg = RPG(penalty=0.9, eos_boost=1.25)
    logits = torch.tensor([[2.0, -3.0, 0.5, 1.0, float("-inf")],
                           [1.0, 1.0, 1.0, 1.0, 1.0]])
    before = logits.clone()
    apply_penalties_(logits, [Penalties({0: 2, 1: 3}, eos=2), Penalties()], rpg, stop_token_ids=[3, 4])
    assert logits[0, 0] == pytest.approx(2.0 + 2 * math.log(0.9))
    assert logits[0, 1] == pytest.approx(-3.0 + 3 * math.log(0.9)) and logits[0, 1] < before[0, 1]  # lowered
    assert logits[0, 3] == pytest.approx(1.0 + 2 * math.log(1.25))
    assert logits[0, 4] == float("-inf")  # a stop token the grammar forbids stays forbidden
    assert torch.equal(logits[1], before[1]) and logits[0, 2] == before[0, 2]
    p, q = torch.softmax(before[0], -1), torch.softmax(logits[0], -1)
    assert (q[0] / q[2]).item() == pytest.approx(0.9**2 * (p[0] / p[2]).item(), rel=1e-5)  # probability × λ^count


def test_transfer_moves_the_decayed_probability_to_end_of_sequence() -> None:
    rpg = RPG(penalty=0.9, eos_boost=1.0)
    logits = torch.tensor([[2.0, -3.0, 0.5, -4.0, -1.0], [2.0, -3.0, 0.5, -4.0, -1.0]])
    before = logits.clone()
    penalties = [Penalties({0: 3}, end_from=0, end_count=2), Penalties({0: 3}, end_from=0, end_count=3)]
    apply_penalties_(logits, penalties, rpg, stop_token_ids=[3, 4])
    e, f = before.double().exp(), logits.double().exp()  # unnormalised probabilities
    assert f[0, 0].item() == pytest.approx(e[0, 0].item() * 0.9**3, rel=1e-5)  # the decay, by the whole count
    assert f[0, 3].item() == pytest.approx(e[0, 3].item() + e[0, 0].item() * (1 - 0.9**2), rel=1e-5)
    assert torch.equal(logits[:, [1, 2, 4]], before[:, [1, 2, 4]])  # one stop token receives it: the first listed
    # when every copy was generated, the mass the decay removes is the mass end-of-sequence gains
    assert torch.logsumexp(logits[1], -1).item() == pytest.approx(torch.logsumexp(before[1], -1).item(), abs=1e-5)


def test_transfer_never_unmasks_and_can_be_switched_off() -> None:
    masked_stop = torch.tensor([[2.0, 0.0, float("-inf"), 0.5]])
    apply_penalties_(masked_stop, [Penalties({0: 5}, end_from=0, end_count=5)], RPG(eos_boost=1.0), [2, 3])
    assert masked_stop[0, 2] == float("-inf") and masked_stop[0, 3] == 0.5  # a grammar forbids ending here
    masked_critical = torch.tensor([[float("-inf"), 0.0, -2.0]])
    apply_penalties_(masked_critical, [Penalties({0: 5}, end_from=0, end_count=5)], RPG(eos_boost=1.0), [2])
    assert masked_critical[0, 2] == -2.0  # nothing to move
    prompt_only = torch.tensor([[2.0, 0.0, -2.0]])
    apply_penalties_(prompt_only, [Penalties({0: 5}, end_from=0, end_count=0)], RPG(eos_boost=1.0), [2])
    assert prompt_only[0, 2] == -2.0  # no copy of the model's own: decayed, not ended
    off = torch.tensor([[2.0, 0.0, -2.0]])
    apply_penalties_(off, [Penalties({0: 5}, end_from=0, end_count=5)], RPG(eos_boost=1.0, eos_transfer=False), [2])
    assert off[0, 2] == -2.0 and off[0, 0] == pytest.approx(2.0 + 5 * math.log(0.9))


def test_only_copies_the_model_wrote_move_probability_to_the_end(smollm2) -> None:
    tokenizer, vocab = smollm2
    prompt = "def test_add():\n" + "".join(f"    assert add({i}, 1) == {i + 1}\n" for i in range(4))
    copies = "".join(f"    assert add({i}, 1) == {i + 1}\n" for i in range(4, 6))
    looped = _up_to_statement(tokenizer, vocab, prompt + copies, "    assert add(6, 1) == 7")
    typed = 0  # the prompt: the longest run of tokens inside it (the model writes the rest)
    while len(vocab.decode(looped[: typed + 1])) <= len(prompt):
        typed += 1
    state = RepetitionState(RPG(content=False), vocab.token_bytes, looped[:typed])
    state.append(looped[typed:])
    penalties = state.penalties()
    (critical, count), = penalties.decay.items()
    assert count == 5 and penalties.end_from == critical and penalties.end_count == 2
    in_prompt = _up_to_statement(tokenizer, vocab, prompt, "    assert add(4, 1) == 5")
    untouched = RepetitionState(RPG(content=False), vocab.token_bytes, in_prompt).penalties()
    assert untouched.decay and untouched.end_from is None  # a prompt that repeats itself is not ended


def _after(tokenizer: Any, vocab: Vocabulary, prompt: str, generated: str,
           language: str = "python") -> tuple[list[int], Penalties]:
    """The generated tokens, and the penalties once the model has written ``generated`` after ``prompt``."""
    ids = tokenizer.encode(generated, add_special_tokens=False)
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
    state = RepetitionState(RPG(content=False, language=language), vocab.token_bytes, prompt_ids)
    state.append(ids)
    return ids, state.penalties()


ADD = "def add(a, b):\n    return a + b\n\n"


def test_a_redefinition_ends_the_completion_by_its_generated_tokens(smollm2) -> None:
    tokenizer, vocab = smollm2
    rewritten = "def add(a, b):\n    total = a + b\n    return total\n\n"
    ids, penalties = _after(tokenizer, vocab, "import math\n\n" + ADD, rewritten)
    assert vocab.token_bytes[ids[0]] == b"def"
    # every generated token of the redefinition repeats the definition it replaces
    assert penalties.decay == {ids[0]: len(ids)} and penalties.end_from == ids[0] and penalties.end_count == len(ids)
    _, half_in_prompt = _after(tokenizer, vocab, ADD + "def add(a, b):\n", "    return b + a\n\n")
    assert half_in_prompt.end_count == len(tokenizer.encode("    return b + a\n\n", add_special_tokens=False))


def test_definitions_that_replace_nothing_are_left_to_the_tandem_detector(smollm2) -> None:
    tokenizer, vocab = smollm2
    other_name = _after(tokenizer, vocab, ADD, "def sub(a, b):\n    return a - b\n\n")[1]
    assert other_name.end_count == 1  # [definition, return] twice in a row: an ordinary repeat, counted once
    overloads = _after(tokenizer, vocab, "@overload\n" + ADD, "@overload\ndef add(a, b):\n    return b + a\n\n")[1]
    assert overloads.end_count <= 1
    methods = "class A:\n    def add(self):\n        return 1\n\n"
    other_class = _after(tokenizer, vocab, methods, "class B:\n    def add(self):\n        return 2\n\n")[1]
    assert other_class.end_count <= 1
    used = _after(tokenizer, vocab, ADD, "def add(a, b):\n    return b + a\n\nprint(add(1, 2))\n")[1]
    assert used.end_count == 0  # the redefinition is no longer the last statement at this level
    inside = _after(tokenizer, vocab, ADD, "def add(a, b):\n    return b + a\n\n    ")[1]
    assert inside.end_count == 0  # the next statement would go in the body, not beside the definition
    in_prompt = _after(tokenizer, vocab, ADD + ADD, "")[1]
    assert list(in_prompt.decay.values()) == [1] and in_prompt.end_from is None  # the user's: the tandem repeat only


def _counter(name: str, summary: str, body: str) -> str:
    return (f'def {name}(s):\n    """{summary}\n\n    >>> {name}("abcde")\n    2\n    """\n'
            f"    {body}\n\n")


VOWELS = _counter("vowels_count", "Count the vowels of the word s.", "return sum(c in 'aeiou' for c in s)")


def _before_next(tokenizer: Any, vocab: Vocabulary, prompt: str, generated: str,
                 statement: str) -> tuple[int, Penalties]:
    """The token that would begin ``statement`` after ``prompt + generated``, and the penalties just before it
    (the generated part fed as the model would: up to that token)."""
    ids = tokenizer.encode(prompt + generated + statement, add_special_tokens=False)
    before = _up_to_statement(tokenizer, vocab, prompt + generated, statement)
    in_prompt = 0
    while len(vocab.decode(before[: in_prompt + 1])) <= len(prompt):
        in_prompt += 1
    state = RepetitionState(RPG(content=False), vocab.token_bytes, before[:in_prompt])
    state.append(before[in_prompt:])
    return ids[len(before)], state.penalties()


def test_a_definition_that_copies_the_docstring_before_it_ends_the_completion(smollm2) -> None:
    tokenizer, vocab = smollm2
    copy = _counter("vowels_count2", "Count the vowels of the word s.", "return len([c for c in s if c in 'aeiou'])")
    ids, penalties = _after(tokenizer, vocab, VOWELS, copy)
    assert vocab.token_bytes[ids[0]] == b"def"
    # a new name and body, but the docstring of the function before it: counted like a redefinition
    assert penalties.decay == {ids[0]: len(ids)} and penalties.end_from == ids[0] and penalties.end_count == len(ids)
    # the prompt ends inside the copy: only the tokens the model adds count
    header = copy[: copy.index("    return")]
    _, finished = _after(tokenizer, vocab, VOWELS + header, copy[len(header):])
    assert 0 < finished.end_count == len(tokenizer.encode(copy[len(header):], add_special_tokens=False))
    # methods of one class too, decayed at the token that would begin the next method (SmolLM2's " def")
    critical, nested = _before_next(tokenizer, vocab, "class Words:\n" + textwrap.indent(VOWELS, "    "),
                                    textwrap.indent(copy, "    "), "    def more(self):\n")
    assert vocab.token_bytes[critical] == b" def"
    assert nested.end_from == critical and nested.decay[critical] == nested.end_count > 40


def test_each_docstring_is_read_without_its_own_name(smollm2) -> None:
    tokenizer, vocab = smollm2
    def doc(name: str) -> str:
        return f"{name} gives the length of s.\n\n    {name} counts every character;\n    {name} of '' is 0.\n    "

    alike = likeness(words(doc("size"), "size"), words(doc("length_of_text"), "length_of_text"))
    assert likeness(words(doc("size")), words(doc("length_of_text"))) < 0.9 <= alike  # the names alone differ
    first, second = (f'def {n}(s):\n    """{doc(n)}"""\n    return len(s)\n\n' for n in ("size", "length_of_text"))
    ids, penalties = _after(tokenizer, vocab, first, second)
    assert penalties.end_count == len(ids)


def test_docstrings_that_differ_or_say_little_are_left_alone(smollm2) -> None:
    tokenizer, vocab = smollm2
    consonants = _counter("consonant_count", "Count the consonants of the word s, ignoring digits and spaces.",
                          "return sum(c.isalpha() and c not in 'aeiou' for c in s)")
    assert _after(tokenizer, vocab, VOWELS, consonants)[1].end_count <= 1
    three_lines = 'def f(s):\n    """Count the vowels.\n\n    Ignores case."""\n    return 1\n\n'
    ids, copied = _after(tokenizer, vocab, three_lines, three_lines.replace("f(", "g("))
    assert copied.end_count == len(ids)  # three lines: long enough to tell
    two_lines = 'def f(s):\n    """Count the vowels.\n    Ignores case."""\n    return 1\n\n'
    assert _after(tokenizer, vocab, two_lines, two_lines.replace("f(", "g("))[1].end_count <= 1  # too short
    bare = "def f(s):\n    return 1\n\n"
    assert _after(tokenizer, vocab, bare, VOWELS)[1].end_count <= 1  # nothing to copy
    helper = '    def inner(t):\n        """Unrelated words.\n\n        Nothing alike."""\n        return t\n'
    outer = VOWELS.replace("    return sum(", helper + "    return sum(")
    assert "def inner" in outer
    ids, through_helper = _after(tokenizer, vocab, outer, VOWELS.replace("vowels_count", "vowels_count2"))
    assert through_helper.end_count == len(ids)  # compared with vowels_count, not with the helper inside it
    copy = VOWELS.replace("vowels_count", "vowels_count2")
    assert _after(tokenizer, vocab, VOWELS + copy, "")[1].end_from is None  # a copy in the prompt is the user's
    prompt_ids = tokenizer.encode(VOWELS, add_special_tokens=False)
    off = RepetitionState(RPG(content=False, copied_docstring=None), vocab.token_bytes, prompt_ids)
    off.append(tokenizer.encode(copy, add_special_tokens=False))
    assert off.penalties().end_count <= 1


def test_a_method_written_again_is_seen_behind_a_keyword_token_that_holds_a_space(smollm2) -> None:
    tokenizer, vocab = smollm2
    method = "    def area(self):\n        return self.w * self.h\n\n"
    rewritten = method.replace("w * self.h", "h * self.w")
    critical, penalties = _before_next(tokenizer, vocab, "class Box:\n" + method, rewritten, "    def more(self):\n")
    assert vocab.token_bytes[critical] == b" def"
    assert penalties.end_from == critical and penalties.end_count > 10


def test_go_redefinitions_count_methods_by_receiver_and_allow_init(smollm2) -> None:
    tokenizer, vocab = smollm2
    package = "package main\n\n"
    push = "func (s *Stack) Push(x int) {\n\ts.items = append(s.items, x)\n}\n\n"
    ids, rewritten = _after(tokenizer, vocab, package + push, push, "go")
    assert rewritten.end_from == ids[0] and rewritten.end_count == len(ids)
    other_receiver = _after(tokenizer, vocab, package + push, push.replace("Stack", "Queue"), "go")[1]
    assert other_receiver.end_count <= 1  # at most the tandem repeat of [method_declaration, statement]
    init = "func init() {\n\tsetup()\n}\n\n"
    assert _after(tokenizer, vocab, package + init, init, "go")[1].end_count <= 1


def test_stage_rows_follow_the_layout(smollm2) -> None:
    tokenizer, vocab = smollm2
    looping = _up_to_statement(tokenizer, vocab, CODE, NEXT)
    plain = tokenizer.encode("x = 1\n", add_special_tokens=False)
    stage = RepetitionStage(RPG(content=False), vocab.token_bytes, sorted(vocab.stop_token_ids), [plain, looping])
    try:
        expected = RepetitionState(RPG(content=False), vocab.token_bytes, looping).penalties()
        assert expected.decay
        logits = torch.zeros(2, vocab.vocab_size)
        layout = StepLayout.one_row_per_sequence([1, 0])
        stage.prepare(layout)
        stage.apply(logits, layout)
        (token, count), = expected.decay.items()
        assert logits[0, token] == pytest.approx(count * math.log(0.9)) and not logits[1].any()
        stage.commit(1, [token])
        stage.rollback(1, 1)
        assert stage.states[1].penalties() == expected
        assert stage.analysis_time_s[1] > 0
    finally:
        stage.close()


def test_bad_settings_fail_early() -> None:
    for kwargs in ({"penalty": 0.0}, {"penalty": 1.5}, {"eos_boost": 0.5}, {"language": "cobol"},
                   {"copied_docstring": 0.0}, {"copied_docstring": 1.5}):
        with pytest.raises(ValueError):
            RPG(**kwargs)  # type: ignore[arg-type]
