"""Allowed-token masks from sets of names, vectorised over the byte-sorted vocabulary.

A language server answers with names (members, importable names, keyword parameters); a decoding
step needs a boolean per token id. Tokens are sorted by their bytes (the engine's
:class:`~codemask.engine.token_trie.TokenTrie`), so for one name the tokens that *are* one of its
prefixes are found by binary search, and the tokens that *start with* the whole name form one
contiguous range whose byte after the name is checked with one gather. The work per step is a few
numpy calls over the names and over those ranges; nothing loops over the vocabulary in Python.

A token is allowed after the text typed so far (``typed``, e.g. ``"app"`` after ``xs.``) when
``typed + token`` is a prefix of ``lead + name`` for some name, or begins with ``lead + name``
followed by a break character (``.append(`` is fine, ``.appendix`` is not unless it is a name). The
``lead`` is what must come between the text and the name (``"."`` when the next token may merge
the dot, ``" "`` after ``import``); with nothing typed yet, only tokens that start with the lead and
an identifier byte are constrained, every other token is left alone.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from codemask.engine.token_trie import ByteVocabulary, TokenTrie, expand_ranges, token_trie

_IDENTIFIER_BYTES = np.zeros(256, dtype=bool)
for _b in b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_":
    _IDENTIFIER_BYTES[_b] = True
_IDENTIFIER_BYTES[0x80:] = True  # non-ASCII letters may be identifier characters: never a break
_SPACE_BYTES = np.zeros(256, dtype=bool)
_SPACE_BYTES[list(b" \t\r\n\f")] = True
_NESTING_BYTES = np.zeros(256, dtype=bool)
_NESTING_BYTES[list(b"()[]{}\"'`#")] = True  # where a later byte is no longer at the argument's level


class NameMasks:
    """Masks over one vocabulary's token ids (``width`` of them) for one language's break characters."""

    def __init__(self, vocab: ByteVocabulary, break_characters: str, width: int | None = None) -> None:
        self.width = max(width or 0, vocab.vocab_size)
        self.trie: TokenTrie = token_trie(vocab)
        self.matrix = self.trie.matrix
        self.lengths = self.trie.lengths
        self.keys = _sorted_keys(self.trie)
        self.breaks = np.zeros(256, dtype=bool)
        self.breaks[list(break_characters.encode("utf-8"))] = True
        self._all_rows = np.arange(self.trie.num_tokens)
        self._break_first = np.flatnonzero(self.breaks[self.matrix[:, 0]])
        # stop and special tokens: no part of a name, so no way to finish one (see `allowed`)
        self.not_names = np.array(sorted(i for i in vocab.stop_token_ids | vocab.special_ids if i < self.width),
                                   dtype=np.int64)
        self._scopes: dict[bytes, np.ndarray] = {}
        self._keyword_forms: dict[bool, tuple[np.ndarray, np.ndarray]] = {}
        self._top_level: dict[int, np.ndarray] = {}
        self._stripped: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        for typed in (False, True):  # built here, not in the middle of a generation
            self._keyword_form(typed)
        for char in ",)":
            self.forbid_top_level(char)
        self._stripped_index()

    # -- names ---------------------------------------------------------------------------------

    def allowed(self, names: Iterable[str], typed: bytes = b"", lead: bytes = b"",
                free: bytes | None = None) -> np.ndarray | None:
        """Bool mask over token ids, or None when no name fits what is typed (leave the step alone).

        ``free`` (with no ``lead``): the trigger is complete and only a name may follow, so every
        token is constrained except those whose first byte is in ``free`` (``b"("`` after
        ``import``). Without it, nothing typed yet constrains only tokens that start a name.

        Where every token is constrained (the trigger typed, or part of the name), stop and special
        tokens are forbidden until what is typed is a whole name: end-of-sequence after ``obj.``
        would leave an empty completion, and after ``ledger.opening_`` a name no member has.
        """
        targets = {lead + n.encode("utf-8") for n in names if n}
        rests = sorted(t[len(typed):] for t in targets if t.startswith(typed))
        if not rests:
            return None
        rows = np.concatenate([self._prefix_rows(rests), self._break_rows(rests)])
        mask = np.zeros(self.width, dtype=bool)
        mask[self.trie.token_ids(rows)] = True  # a row found twice is set twice: no np.unique
        if len(typed) > len(lead) or (free is not None and not lead):
            scope = self._scope(None, b"" if typed else free or b"")  # free only before the name starts
            mask |= ~scope
            if b"" not in rests:  # (the name is not complete yet)
                mask[self.not_names] = False
            return mask
        mask |= ~self._scope(lead)
        return mask

    def _prefix_rows(self, rests: list[bytes]) -> np.ndarray:
        """Rows of tokens equal to a non-empty prefix of some rest."""
        limit = self.matrix.shape[1]
        prefixes = {r[:k] for r in rests for k in range(1, min(len(r), limit) + 1)}
        return self._exact_rows(sorted(prefixes))

    def _break_rows(self, rests: list[bytes]) -> np.ndarray:
        """Rows of tokens that spell a whole rest and then a break character."""
        parts = [self._break_first] if b"" in rests else []
        whole = [r for r in rests if r and r[-1] < 0xFF and len(r) < self.matrix.shape[1]]
        if whole:
            lo = np.searchsorted(self.keys, np.array(whole, dtype=self.keys.dtype), side="left")
            upper = [r[:-1] + bytes([r[-1] + 1]) for r in whole]
            hi = np.searchsorted(self.keys, np.array(upper, dtype=self.keys.dtype), side="left")
            rows = expand_ranges(lo, hi)
            column = np.repeat(np.array([len(r) for r in whole]), hi - lo)
            keep = (self.lengths[rows] > column) & self.breaks[self.matrix[rows, column]]
            parts.append(rows[keep])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _exact_rows(self, spellings: list[bytes], keys: np.ndarray | None = None,
                    key_lengths: np.ndarray | None = None) -> np.ndarray:
        """Positions in ``keys`` (default: the trie's sorted tokens) of tokens spelled exactly so."""
        keys = self.keys if keys is None else keys
        key_lengths = self.lengths if key_lengths is None else key_lengths
        spellings = [s for s in spellings if len(s) <= keys.dtype.itemsize]
        if not spellings:
            return np.zeros(0, dtype=np.int64)
        wanted = np.array(spellings, dtype=keys.dtype)
        lo = np.searchsorted(keys, wanted, side="left")
        hi = np.searchsorted(keys, wanted, side="right")  # equal keys: tokens that differ in padding
        rows = expand_ranges(lo, hi)
        lengths = np.repeat(np.array([len(s) for s in spellings]), hi - lo)
        return rows[key_lengths[rows] == lengths]  # zero padding: b"a" vs b"a\0"

    def _starting_rows(self, spellings: list[bytes], keys: np.ndarray | None = None) -> np.ndarray:
        """Positions in ``keys`` of tokens that begin with one of ``spellings`` (one range each)."""
        keys = self.keys if keys is None else keys
        whole = [s for s in spellings if s and s[-1] < 0xFF and len(s) <= keys.dtype.itemsize]
        if not whole:
            return np.zeros(0, dtype=np.int64)
        lo = np.searchsorted(keys, np.array(whole, dtype=keys.dtype), side="left")
        upper = [s[:-1] + bytes([s[-1] + 1]) for s in whole]
        hi = np.searchsorted(keys, np.array(upper, dtype=keys.dtype), side="left")
        return expand_ranges(lo, hi)

    def lead_scope(self, lead: bytes) -> np.ndarray:
        """Bool over token ids: the tokens ``allowed(names, b"", lead)`` may forbid (those starting with
        ``lead`` and an identifier byte); every other token it allows whatever the names."""
        return self._scope(lead)

    def _scope(self, lead: bytes | None, free: bytes = b"") -> np.ndarray:
        """Token ids the name constraint applies to: all tokens but those starting with a ``free`` byte
        (``lead`` None), or those starting with ``lead`` and an identifier byte."""
        key = b"\xff<all>" + free if lead is None else lead
        scope = self._scopes.get(key)
        if scope is None:
            if lead is None:
                rows = self._all_rows[~np.isin(self.matrix[:, 0], np.frombuffer(free, dtype=np.uint8))]
            else:
                n = len(lead)
                ok = self.lengths > n
                if n:
                    ok &= (self.matrix[:, :n] == np.frombuffer(lead, dtype=np.uint8)).all(axis=1)
                ok &= _IDENTIFIER_BYTES[self.matrix[:, min(n, self.matrix.shape[1] - 1)]]
                rows = np.flatnonzero(ok)
            scope = np.zeros(self.width, dtype=bool)
            scope[self.trie.token_ids(rows)] = True
            self._scopes[key] = scope
        return scope

    # -- call arguments ----------------------------------------------------------------------

    def forbid_top_level(self, char: str) -> np.ndarray:
        """Bool mask forbidding tokens that put ``char`` at the level of the argument list: the token
        holds it before any bracket, quote or comment start (``,``, ``x,``, ``)`` and ``1)`` are
        forbidden; ``"a,``, ``(1,`` and ``f())`` are not). Built once per character."""
        byte = ord(char)
        cached = self._top_level.get(byte)
        if cached is None:
            inside = np.arange(self.matrix.shape[1])[None, :] < self.lengths[:, None]
            hit = (self.matrix == byte) & inside
            nesting = _NESTING_BYTES[self.matrix] & inside & ~hit
            first_hit = np.where(hit.any(axis=1), np.argmax(hit, axis=1), self.matrix.shape[1])
            first_nesting = np.where(nesting.any(axis=1), np.argmax(nesting, axis=1), self.matrix.shape[1])
            rows = np.flatnonzero(first_hit < first_nesting)
            cached = np.ones(self.width, dtype=bool)
            cached[self.trie.token_ids(rows)] = False
            self._top_level[byte] = cached
        return cached

    def keyword_argument_only(self, names: Iterable[str], typed: bytes = b"",
                              free: bytes = b")", more_space: bool = True) -> np.ndarray | None:
        """Bool mask for an argument that can only be a keyword argument ``name=`` for one of ``names``
        (the positional parameters are all taken): what is typed plus the token, leading whitespace
        aside, must be a prefix of ``name=`` or start with it. Before anything is typed, tokens that
        start with a ``free`` byte (``)``) stay allowed, and with ``more_space`` those that are only
        whitespace. Not ``#`` nor ``*``: a comment or an unpacking would carry the positional argument
        the model wanted past the monitor (it did, in the benchmark); ``more_space`` False once the
        argument holds a newline, so that the model does not pad the call with blank lines instead.
        None when what is typed already fits no name (the argument is something else: no constraint).
        """
        targets = sorted({n.encode("utf-8") + b"=" for n in names if n})
        if typed:
            rests = [t[len(typed):] for t in targets if t.startswith(typed) and len(t) > len(typed)]
            if not rests:
                return None
            prefixes = sorted({r[:k] for r in rests for k in range(1, len(r) + 1)})
            rows = np.concatenate([self._exact_rows(prefixes), self._starting_rows(rests)])
            mask = np.zeros(self.width, dtype=bool)
            mask[self.trie.token_ids(rows)] = True  # a row found twice is set twice: no np.unique
            return mask
        keys, order, lengths, first = self._stripped_index()
        prefixes = sorted({t[:k] for t in targets for k in range(1, len(t) + 1)})
        at = np.concatenate([self._exact_rows(prefixes, keys, lengths), self._starting_rows(targets, keys),
                             np.flatnonzero(lengths == 0) if more_space else np.zeros(0, dtype=np.int64),
                             np.flatnonzero(np.isin(first, np.frombuffer(free, dtype=np.uint8)) & (lengths > 0))])
        mask = np.zeros(self.width, dtype=bool)
        mask[self.trie.token_ids(order[at])] = True
        return mask

    def _stripped_index(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The tokens without their leading whitespace, sorted: (keys, trie rows, lengths, first
        bytes), built once (argsort over the vocabulary's fixed-width keys, in C)."""
        if self._stripped is None:
            spaces = _run_length(_SPACE_BYTES[self.matrix], self.lengths)
            shifted = np.ascontiguousarray(_shift_left(self.matrix, spaces))
            keys = shifted.view(f"S{shifted.shape[1]}").ravel()
            order = np.argsort(keys, kind="stable")
            self._stripped = (keys[order], order, (self.lengths - spaces)[order], shifted[order, 0])
        return self._stripped

    # -- keyword arguments -------------------------------------------------------------------

    def keywords(self, names: Iterable[str], typed: bytes = b"") -> np.ndarray:
        """Bool mask that forbids finishing ``word=`` (a keyword argument) unless ``word`` is a name.

        Only tokens that complete such a form are constrained: with nothing typed, tokens like
        ``" key="`` (spaces, an identifier, ``=`` not followed by ``=``); after a typed partial, tokens
        that go on with identifier bytes and then ``=``.
        """
        rows, words = self._keyword_form(bool(typed))
        full = np.char.add(np.array(typed, dtype=f"S{max(len(typed), 1)}"), words) if typed else words
        wanted = np.array(sorted({n.encode("utf-8") for n in names}) or [b"\xff"])
        bad = rows[~np.isin(full, wanted)]
        mask = np.ones(self.width, dtype=bool)
        mask[self.trie.token_ids(bad)] = False
        return mask

    def _keyword_form(self, typed: bool) -> tuple[np.ndarray, np.ndarray]:
        """Rows that complete ``word=`` (or ``word =``: spaces may come before the ``=``) and their
        words (built once per vocabulary and case).

        Only the few thousand tokens holding a ``=`` are examined: one pass over the vocabulary.
        """
        cached = self._keyword_forms.get(typed)
        if cached is not None:
            return cached
        candidates = np.flatnonzero((self.matrix == ord("=")).any(axis=1))
        m, lengths = self.matrix[candidates], self.lengths[candidates]
        width = m.shape[1]
        spaces = np.zeros(len(lengths), dtype=np.int64) if typed else _run_length(m == ord(" "), lengths)
        shifted = _shift_left(m, spaces)
        run = _run_length(_IDENTIFIER_BYTES[shifted], lengths - spaces)
        gap = _run_length(_shift_left(m, spaces + run) == ord(" "), lengths - spaces - run)
        at = np.minimum(spaces + run + gap, width - 1)
        eq = (spaces + run + gap < lengths) & (m[np.arange(len(m)), at] == ord("="))
        nxt = np.minimum(at + 1, width - 1)
        eq &= (at + 1 >= lengths) | (m[np.arange(len(m)), nxt] != ord("="))
        if not typed:
            eq &= run > 0
        keep = np.flatnonzero(eq)
        column = np.arange(width)
        words_matrix = np.where(column[None, :] < run[keep, None], shifted[keep], 0).astype(np.uint8)
        words = np.ascontiguousarray(words_matrix).view(f"S{width}").ravel()
        rows = candidates[keep]
        self._keyword_forms[typed] = (rows, words)
        return rows, words


def _sorted_keys(trie: TokenTrie) -> np.ndarray:
    """The trie's sorted token bytes as fixed-width byte strings (a view when numpy agrees on the order)."""
    width = trie.matrix.shape[1]
    keys = np.ascontiguousarray(trie.matrix).view(f"S{width}").ravel()
    if len(keys) > 1 and not bool(np.all(keys[:-1] <= keys[1:])):
        raise ValueError("token bytes with trailing NUL bytes break the sorted-key order")
    return keys


def _run_length(flags: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row, how many leading columns are True (within the row's length)."""
    width = flags.shape[1]
    inside = np.arange(width)[None, :] < lengths[:, None]
    stop = ~(flags & inside)
    first = np.argmax(stop, axis=1)
    return np.where(stop.any(axis=1), first, width).astype(np.int64)


def _shift_left(matrix: np.ndarray, by: np.ndarray) -> np.ndarray:
    """Each row shifted left by ``by[row]`` columns (zero-filled)."""
    if not by.any():
        return matrix
    width = matrix.shape[1]
    columns = np.arange(width)[None, :] + by[:, None]
    out = np.take_along_axis(matrix, np.minimum(columns, width - 1), axis=1)
    out[columns >= width] = 0
    return out


_MASKS: dict[tuple[str, str, int], NameMasks] = {}


def name_masks(vocab: ByteVocabulary, break_characters: str, width: int | None = None) -> NameMasks:
    """The :class:`NameMasks` of a vocabulary, built once per process: its scopes and keyword forms
    take seconds to build on a 150k-token vocabulary and are the same for every generation."""
    key = (vocab.fingerprint, break_characters, max(width or 0, vocab.vocab_size))
    masks = _MASKS.get(key)
    if masks is None:
        masks = _MASKS[key] = NameMasks(vocab, break_characters, width)
    return masks
