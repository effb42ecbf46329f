"""`GrammarCompiler`: grammar + vocabulary -> `CompiledGrammar`, cached in memory and on disk.

Compiling means: optimise the IR and build the per-rule automata. The vocabulary is classified
at each automaton position (the adaptive mask cache) when a parser state first needs it — one C
scan of the vocabulary's trie, well under a millisecond — or for every position at compile time
with ``precompute=True``. The result depends only on the grammar's
canonical text and the vocabulary's fingerprint, so it is kept in memory for the process and
written to a cache folder (`disk_cache`: data only, checked on load, capped in size), from which
a later process loads it in milliseconds. Lexer-mode
grammars have no finite list of positions: what their masks learn (`LexerMaskState`) is saved
beside the compiled form instead, after sample code of the language where there is some
(`samples`, the precompute) or whenever asked (`save_mask_state`, ``codemask warm``).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import os
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
from tqdm import tqdm

from codemask.engine import native
from codemask.engine.automaton import RTN, build_rtn, clear_rule_automata
from codemask.engine.bitmask import bitmask_width
from codemask.engine.collection import collection_paused
from codemask.engine.disk_cache import DiskCache, cache_limit_bytes
from codemask.engine.lexer import LexerCore, LexParserCore, TerminalAutomata, build_terminal_automata
from codemask.engine.lexer_masks import (
    LexerMaskComputer,
    LexerMaskState,
    LexerPosition,
    Residuals,
    ResidualSplit,
    UncertainTokens,
)
from codemask.engine.mask_computer import MaskComputer
from codemask.engine.parser import ParserCore
from codemask.engine.position_masks import LazyPositionMasks, PositionMasks, build_position_masks
from codemask.engine.samples import has_samples, sample_tokens
from codemask.engine.shared_positions import SharedPositions
from codemask.engine.string_chains import CharCounts
from codemask.engine.token_trie import ByteVocabulary, token_trie
from codemask.engine.uncertain import Uncertain
from codemask.grammar.grammar import Grammar
from codemask.grammar.ir import GrammarIR, clear_references, references_remembered
from codemask.grammar.optimize import optimize
from codemask.source_digest import files_digest

# A compiled grammar starts a new generation of parser states past this many (`CompiledGrammar`):
# about 1.5 KB each with their transition row and stack nodes, so ~75 MB, plus the generation's
# masks (at most `MaskComputer`'s capacity).
DEFAULT_MAX_PARSER_STATES = 50_000

# Bump when the compiled format or the algorithm changes: old cache files are then ignored.
ENGINE_VERSION = "4"

# Precomputing a lexer-mode grammar with Python-style indentation also classifies the newline
# states of every indentation column up to this one (`LexerMaskComputer.classify_indentation`):
# ~60 states, 0.04 s with a 128k vocabulary.
INDENT_COLUMNS = 40

# A lexer-mode grammar's saved mask state lies beside its compiled form (`save_mask_state`), named
# also by the engine's own source (`engine_fingerprint`).
MASK_STATE_SUFFIX = ".masks"


@functools.cache
def engine_fingerprint() -> str:
    """A digest of the engine's modules, Python and C. A saved mask state holds the results of
    the lexer's algorithms (transitions, classifications, splits), not only of the grammar: a
    state saved by another version of them must not be read, even where `ENGINE_VERSION` was not
    bumped. (The C and numpy paths give the same results, so which one ran does not matter.)"""
    return files_digest(Path(__file__).parent, ("*.py", "_native*.so", "_native*.pyd"))[:16]


def default_cache_dir() -> Path:
    """``$CODEMASK_HOME/compiled`` (``~/.cache/codemask/compiled`` by default)."""
    home = os.environ.get("CODEMASK_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "codemask")
    return Path(home) / "compiled"


@dataclass
class CompiledArtifacts:
    """What compilation produces and the disk cache stores.

    Byte-level grammars carry the position masks when they were precomputed (otherwise each
    position is classified when first needed); lexer-mode grammars carry the terminal automata
    instead (their masks are keyed by lexer state and computed when first needed).
    """

    rtn: RTN
    masks: PositionMasks | None = None
    terminals: TerminalAutomata | None = None


@dataclass
class CompiledGrammar:
    """A grammar compiled for one vocabulary; matchers created from it share its caches.

    Parser states are interned as matchers meet them and never forgotten while a matcher may
    still name them, so a grammar shared by many requests (a server's) would grow without bound
    (nested JSON makes tens of new states per document, each with a 1 KB transition row and its
    masks). The states and their memos therefore live in a *generation* (a parser core and its
    mask computer): once the current one holds more than ``max_states`` states, the next matcher
    (or `GrammarMatcher.reset`) starts a fresh generation, and the old one is freed with the last
    matcher that uses it. What does not depend on parser states is shared by every generation and
    kept: the position masks of byte-level grammars, and in lexer mode the lexer's states, their
    classifications and residual sets. A generation's masks are exactly the masks of a fresh
    compile, whichever generation computes them.
    """

    grammar: Grammar
    vocab: ByteVocabulary
    artifacts: CompiledArtifacts
    max_states: int = field(default=DEFAULT_MAX_PARSER_STATES, kw_only=True)
    generations: int = field(default=0, init=False)  # how many generations were started (the first is 1)
    _current: tuple[ParserCore | LexParserCore, MaskComputer | LexerMaskComputer] = field(init=False, repr=False)
    _positions: PositionMasks | LazyPositionMasks | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_states, bool) or not isinstance(self.max_states, int) or self.max_states < 1:
            raise ValueError(f"max_states must be a positive int, got {self.max_states!r}")
        artifacts = self.artifacts
        if artifacts.terminals is None:
            # Lazy positions are classified over a core of their own (frame states only), so that
            # their walks outlive the generations whose masks read them.
            self._positions = artifacts.masks if artifacts.masks is not None else LazyPositionMasks(
                ParserCore(artifacts.rtn), token_trie(self.vocab), self.vocab.vocab_size)
        self._current = self._start_generation(None)

    @property
    def core(self) -> ParserCore | LexParserCore:
        """The current generation's parser core (a matcher keeps the one it started with)."""
        return self._current[0]

    @property
    def masks(self) -> MaskComputer | LexerMaskComputer:
        """The current generation's mask computer (a matcher keeps the one it started with)."""
        return self._current[1]

    def generation(self) -> tuple[ParserCore | LexParserCore, MaskComputer | LexerMaskComputer]:
        """The core and masks a new matcher starts with: the current generation's, or a fresh
        generation's where the current one has outgrown `max_states`."""
        with self._lock:
            if _num_states(self._current[0]) > self.max_states:
                self._current = self._start_generation(self._current[1])
            return self._current

    def _start_generation(self, previous: MaskComputer | LexerMaskComputer | None
                          ) -> tuple[ParserCore | LexParserCore, MaskComputer | LexerMaskComputer]:
        artifacts, vocab = self.artifacts, self.vocab
        self.generations += 1
        if artifacts.terminals is not None:
            lexer = previous.core.lexer if isinstance(previous, LexerMaskComputer) else LexerCore(artifacts.terminals)
            lex_core = LexParserCore(ParserCore(artifacts.rtn, lazy=True), lexer)
            if isinstance(previous, LexerMaskComputer):
                return lex_core, previous.renewed(lex_core)
            return lex_core, LexerMaskComputer(lex_core, vocab)
        assert self._positions is not None
        positions = self._positions
        core = ParserCore(artifacts.rtn, like=positions.core if isinstance(positions, LazyPositionMasks) else None)
        return core, MaskComputer(core, self._positions, token_trie(vocab), vocab.vocab_size, vocab.stop_token_ids)

    @property
    def vocab_size(self) -> int:
        return self.vocab.vocab_size

    def __repr__(self) -> str:
        rtn = self.artifacts.rtn
        masks = self.artifacts.masks
        if masks is not None:
            detail = f"uncertain={masks.num_uncertain}"
        else:
            detail = "lexer" if self.artifacts.terminals is not None else "lazy masks"
        return (f"CompiledGrammar({self.grammar.kind}, rules={len(rtn.rule_names)}, states={rtn.num_states}, "
                f"{detail}, vocab={self.vocab_size})")


class GrammarCompiler:
    """Compiles grammars for one vocabulary.

    ``cache_dir=None`` uses the default folder; ``cache_dir=False`` disables the disk cache.
    Byte-level grammars (EBNF, regex, JSON Schema) are classified position by position when a
    parser state first needs one (``precompute=False``, and the default ``"auto"``): compiling
    costs only the automata (milliseconds for a JSON Schema), and a first visit is one C scan of
    the vocabulary's trie, under a millisecond for most positions with a 128k vocabulary (without
    the C extension, milliseconds in numpy). ``precompute=True`` classifies every position at
    compile time instead (and stores that in the disk cache), a cost that grows with the
    grammar's size for masks that are cheap anyway. Grammars in lexer mode
    (Lark with terminals) have no finite list of positions: their masks rest on the lexer states
    met at token boundaries, so precomputing runs sample code of the language through the grammar
    (`samples`: a tour of each builtin code grammar's syntax, and for Python 40,000 tokens of code
    in all; 1-5 s with a 128k vocabulary) and keeps the mask state in the disk cache — with
    ``precompute=True``, and by default where there is a disk cache (once per grammar and
    vocabulary); other lexer states are classified when met.
    ``progress`` shows a progress bar when a precomputation takes more than a second. The
    ``memory_size`` most recently used grammars stay compiled in memory (a server compiling a
    schema per request must not grow without bound); older ones come back from disk. The disk
    cache holds at most ``max_cache_mb`` megabytes (default ``$CODEMASK_CACHE_MAX_MB``, else
    `disk_cache.DEFAULT_MAX_MB`), least recently used entries going first; an entry that fails
    its checks, or from which the grammar does not build, is rebuilt and overwritten. A compiled
    grammar keeps at most about ``max_parser_states`` interned parser states for new matchers
    (`CompiledGrammar`'s generations), so one grammar serving request after request stays bounded.
    """

    def __init__(self, vocab: ByteVocabulary, *, cache_dir: str | Path | bool | None = None,
                 progress: bool = True, memory_size: int = 128,
                 precompute: bool | Literal["auto"] = "auto", max_cache_mb: float | None = None,
                 max_parser_states: int = DEFAULT_MAX_PARSER_STATES) -> None:
        self.vocab = vocab
        self.cache_dir: Path | None
        if cache_dir is False:
            self.cache_dir = None
        elif cache_dir is None or cache_dir is True:
            self.cache_dir = default_cache_dir()
        else:
            self.cache_dir = Path(cache_dir)
        if isinstance(max_parser_states, bool) or not isinstance(max_parser_states, int) or max_parser_states < 1:
            raise ValueError(f"max_parser_states must be a positive int, got {max_parser_states!r}")
        self.max_parser_states = max_parser_states
        self.disk = DiskCache(self.cache_dir, cache_limit_bytes(max_cache_mb)) if self.cache_dir is not None else None
        if precompute not in (True, False, "auto"):
            raise ValueError(f"precompute must be True, False or 'auto', got {precompute!r}")
        self.progress = progress
        self.precompute = precompute
        self._memory: OrderedDict[str, CompiledGrammar] = OrderedDict()
        self._memory_size = memory_size
        self._lock = threading.Lock()
        self._pending: dict[str, threading.Event] = {}  # grammars being compiled, by key
        self._writable: bool | None = None  # whether the disk cache folder takes files (`_cache_writable`)
        _prepare_vocabulary(vocab)

    def compile(self, grammar: Grammar) -> CompiledGrammar:
        """The compiled form of ``grammar`` (from memory, disk, or freshly built).

        Compiling runs outside the compiler's lock (a lexer-mode precompute takes seconds, and a
        server compiling other grammars on other threads must not wait for it); a second caller
        for the same grammar waits for the first instead of compiling it again."""
        if not isinstance(grammar, Grammar):
            raise TypeError(f"compile() takes a Grammar, got {type(grammar).__name__}; "
                            "build one with Grammar.from_ebnf / from_lark / from_regex / builtin")
        key = self._key(grammar)
        while True:
            with self._lock:
                found = self._memory.get(key)
                if found is not None:
                    self._memory.move_to_end(key)
                    return found
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = threading.Event()
                    break
            pending.wait()  # another thread is compiling it: then it is in memory (or failed: try again)
        try:
            compiled = self._compile(key, grammar)
            with self._lock:
                self._memory[key] = compiled
                if len(self._memory) > self._memory_size:
                    self._memory.popitem(last=False)
            return compiled
        finally:
            with self._lock:
                del self._pending[key]
            pending.set()

    def _compile(self, key: str, grammar: Grammar) -> CompiledGrammar:
        compiled = self._from_disk(key, grammar)
        if compiled is None:
            artifacts = self._build(grammar)
            self._store(key, artifacts)
            compiled = CompiledGrammar(grammar.detached(), self.vocab, artifacts, max_states=self.max_parser_states)
        loaded = self._load_mask_state(key, compiled)
        if not loaded and self._precomputes_lexer(compiled):
            self._precompute_lexer(compiled)
        if isinstance(compiled.masks, LexerMaskComputer) and (loaded or self.precompute is not False):
            compiled.masks.prepare()  # (else the first mask builds the vocabulary's trie: 0.5-0.7 s with Llama-3)
        return compiled

    def _from_disk(self, key: str, grammar: Grammar) -> CompiledGrammar | None:
        """The grammar built from its disk cache entry, or None where there is none, it lacks the
        masks this compiler precomputes, or building from it fails: an entry that passed its
        checksum but does not build (written by a faulty version, or planted) must not make every
        later compile fail, so it is rebuilt and overwritten instead."""
        artifacts = self._load(key)
        if artifacts is None or self._lacks_masks(artifacts):
            return None
        try:
            return CompiledGrammar(grammar.detached(), self.vocab, artifacts, max_states=self.max_parser_states)
        except Exception:  # (whatever an unsound entry makes the engine raise: rebuilding is the answer)
            return None

    def _lacks_masks(self, artifacts: CompiledArtifacts) -> bool:
        """A lazily compiled grammar from the disk cache that this compiler would precompute."""
        return artifacts.masks is None and artifacts.terminals is None and self._precomputes(artifacts.rtn)

    def _precomputes(self, rtn: RTN) -> bool:
        """Whether this compiler classifies every position of a byte-level ``rtn`` at compile time
        (only when asked: a first visit costs less than a millisecond)."""
        return self.precompute is True

    def _precomputes_lexer(self, compiled: CompiledGrammar) -> bool:
        """Whether this compiler runs a lexer-mode grammar's samples at compile time: with
        ``precompute=True``, and by default where the disk cache keeps the result (the cost is
        then paid once per grammar and vocabulary, not per process)."""
        if not isinstance(compiled.masks, LexerMaskComputer) or not has_samples(compiled.grammar):
            return False
        return self.precompute is True or (self.precompute == "auto" and self._cache_writable())

    def _cache_writable(self) -> bool:
        """Whether the disk cache folder takes files (checked once): by default a precompute is
        only worth its seconds where its result is kept for later processes."""
        if self._writable is None:
            self._writable = False
            if self.disk is not None and self.disk.writable():
                with contextlib.suppress(OSError), tempfile.TemporaryFile(dir=self.disk.folder):
                    self._writable = True
        return self._writable

    def _precompute_lexer(self, compiled: CompiledGrammar) -> None:
        """Masks at every token of the grammar's sample code (`samples`) and of the newline states
        of the first indentation columns, then the mask state saved to the disk cache (where there
        is one) for later processes. An optimisation: where it fails, the masks stay lazy."""
        masks = compiled.masks
        assert isinstance(masks, LexerMaskComputer)
        label = f"precomputing {compiled.grammar.builtin_name} masks on sample code" if self.progress else None
        try:
            self.warm(compiled, sample_tokens(compiled.grammar, self.vocab), label)
            masks.classify_indentation(INDENT_COLUMNS)
        except Exception as error:  # (a sample the parser finds too ambiguous, an unreadable module...)
            warnings.warn(f"precomputing masks on sample code failed ({error}); they are computed when needed",
                          RuntimeWarning, stacklevel=3)
        masks.forget_masks()  # the samples' own masks (60 MB of rows for Llama-3), rarely met again
        self.save_mask_state(compiled)
        # The samples leave tens of thousands of long-lived objects behind, which would trigger a
        # full collection of the whole process at some later mask (0.15 s in a process that has
        # imported torch, ad hoc): collect now, at compile time, instead.
        gc.collect()

    def warm(self, compiled: CompiledGrammar, sequences: Iterable[Sequence[int]], progress: str | None = None) -> int:
        """Compute the mask before every token of each token sequence (a file of the grammar's
        language, tokenized), so that the lexer states, residual splits and parser contexts they
        meet are computed now rather than at a later mask; a sequence stops at the first token the
        grammar refuses. Returns the number of tokens taken. ``progress`` labels a progress bar
        shown when this takes more than a second."""
        from codemask.engine.matcher import GrammarMatcher  # (the matcher module imports this one)

        sequences = list(sequences)
        row = np.zeros((1, bitmask_width(compiled.vocab_size)), dtype=np.int32)
        taken = 0
        bar = tqdm(total=sum(len(tokens) for tokens in sequences), desc=progress or "", unit="tok", delay=1.0,
                   leave=False, disable=progress is None)
        with bar:
            for tokens in sequences:
                matcher = GrammarMatcher(compiled)
                for token in tokens:
                    matcher.fill_next_token_bitmask(row)
                    if not matcher.accept_token(int(token)):
                        break
                    taken += 1
                bar.update(len(tokens))
        return taken

    def _key(self, grammar: Grammar) -> str:
        text = f"{ENGINE_VERSION}\n{grammar.cache_key}\n{self.vocab.fingerprint}"
        return hashlib.sha256(text.encode()).hexdigest()

    def _build(self, grammar: Grammar) -> CompiledArtifacts:
        with collection_paused(), references_remembered():  # (its trees and automata all live until it ends)
            return self._build_artifacts(grammar)

    def _build_artifacts(self, grammar: Grammar) -> CompiledArtifacts:
        ir = optimize(grammar.ir)
        if ir.lexer_mode:
            return _build_lexer_mode(ir)
        rtn = build_rtn({name: rule.body for name, rule in ir.rules.items()}, ir.start,
                        shared=frozenset(name for name, rule in ir.rules.items() if rule.shared))
        if not self._precomputes(rtn):
            return CompiledArtifacts(rtn=rtn)
        label = f"compiling {grammar.kind} grammar" if self.progress else None
        masks = build_position_masks(ParserCore(rtn), token_trie(self.vocab), self.vocab.vocab_size, label)
        return CompiledArtifacts(rtn=rtn, masks=masks)

    def _state_name(self, key: str) -> str:
        """A grammar's mask state lies beside its compiled form, named by the engine's build."""
        return f"{key}{MASK_STATE_SUFFIX}-{engine_fingerprint()}"

    def save_mask_state(self, compiled: CompiledGrammar) -> Path | None:
        """Save what a lexer-mode grammar's masks have learnt so far (`LexerMaskState`: lexer
        states, their classifications, residual sets and splits) beside the compiled grammar, so
        that later compiles of the same grammar for the same vocabulary start with it — a
        completion server that restarts, or one warmed ahead on sample code (``codemask warm``).
        Masks may be computed meanwhile (`LexerMaskComputer.save_state`). Returns the file written
        (None without a disk cache, where it could not be written, or for byte-level grammars,
        whose masks are precomputed at compile time instead); states saved by other builds of the
        engine are removed."""
        if compiled.vocab.fingerprint != self.vocab.fingerprint:
            raise ValueError("this grammar was compiled for another vocabulary than this compiler's")
        key = self._key(compiled.grammar)
        if self.disk is None or not isinstance(compiled.masks, LexerMaskComputer):
            return None
        path = self.disk.write(self._state_name(key), compiled.masks.save_state(), STATE_TYPES)
        if path is not None:
            self.disk.remove(f"{key}{MASK_STATE_SUFFIX}-*", keep=path)
        return path

    def _load_mask_state(self, key: str, compiled: CompiledGrammar) -> bool:
        """Start a lexer-mode grammar's masks from a saved state, if there is one that fits, and
        say whether it did. The file is a cache: one that cannot be read or does not fit
        (`load_state` checks it all before taking anything) leaves the masks to start from scratch."""
        if self.disk is None or not isinstance(compiled.masks, LexerMaskComputer):
            return False
        state = self.disk.read(self._state_name(key), LexerMaskState, STATE_TYPES)
        if state is None:
            return False
        try:
            compiled.masks.load_state(state)  # (it checks the format, vocabulary, automata, references)
        except Exception:  # (an entry the checks let through but the engine refuses: start from scratch)
            return False
        return True

    def _load(self, key: str) -> CompiledArtifacts | None:
        """The entry's artifacts; None where there is none or it fails its checks (then rebuilt)."""
        return self.disk.read(key, CompiledArtifacts, ARTIFACT_TYPES) if self.disk is not None else None

    def _store(self, key: str, artifacts: CompiledArtifacts) -> None:
        if self.disk is not None:
            self.disk.write(key, artifacts, ARTIFACT_TYPES)


def forget_shared_work() -> None:
    """Forget what compiles share in this process, however many compilers: rule automata (by rule
    body), the position masks of rules every grammar has alike (free strings, numbers), and the
    remembered rule references of expressions. Memory is freed, and the next compile is as cold
    as the first (what a benchmark of cold compiles needs); compiled grammars keep working."""
    clear_rule_automata()
    SharedPositions.clear_all()
    clear_references()


def _prepare_vocabulary(vocab: ByteVocabulary) -> None:
    """Build what every grammar of a vocabulary walks, once per vocabulary and process, when its
    first compiler is made (a server's start) rather than at its first compile or mask: the sorted
    token trie (half a second for Llama-3), its tokens' JSON string lengths (`CharCounts`, 15 ms)
    and, with the C extension, its walker's arrays and suffix numbers (a tenth of a second)."""
    trie = token_trie(vocab)
    CharCounts.of(trie, vocab.vocab_size)
    if native.enabled():
        native.position_walker(trie, vocab.vocab_size)


def _num_states(core: ParserCore | LexParserCore) -> int:
    """The parser states a generation holds (in lexer mode, combined and parser states)."""
    if isinstance(core, LexParserCore):
        return len(core.keys) + core.parser.num_states
    return core.num_states


def _build_lexer_mode(ir: GrammarIR) -> CompiledArtifacts:
    terminals = list(ir.terminals.values())
    index = {t.name: i for i, t in enumerate(terminals)}
    automata = build_terminal_automata(terminals, set(ir.ignore))
    rtn = build_rtn({name: rule.body for name, rule in ir.rules.items()}, ir.start,
                    alphabet=max(len(terminals), 1), terminal_index=index)
    return CompiledArtifacts(rtn=rtn, terminals=automata)


# The classes a disk cache entry may hold (`disk_cache`: built from their saved fields, nothing else).
ARTIFACT_TYPES: tuple[type, ...] = (CompiledArtifacts, RTN, PositionMasks, Uncertain, TerminalAutomata)
STATE_TYPES: tuple[type, ...] = (LexerMaskState, LexerPosition, UncertainTokens, Residuals, ResidualSplit)
