"""The compiled token indexes a server keeps, one per pattern, within a byte budget.

A schema compiles in about half a second, and the same schema comes back
request after request: the index (its byte automaton and the masks built so
far) is worth keeping. But a pattern is client input, and a server that kept
every index would grow with every new one. So the cache counts bytes, drops
the least recently used indexes when it is over its budget, and never drops
one that a running request is decoding with.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable

from miniyaie.structured.fsm import PatternError, compile_regex
from miniyaie.structured.limits import Budget, Limits
from miniyaie.structured.token_index import TokenIndex
from miniyaie.structured.vocabulary import Vocabulary


def build_index(pattern: str, budget: Budget, keyword: str, vocabulary: Vocabulary,
                model_vocab_size: int) -> TokenIndex:
    """Compile a pattern into its TokenIndex within `budget`, its first state's mask built (the slow part)."""
    dfa = compile_regex(pattern, budget, keyword, built=keyword in ("json_schema", "guided_choice"))
    index = TokenIndex(dfa, vocabulary, model_vocab_size)
    budget.check()
    if not index.mask(index.dfa.initial).any():  # the first vocabulary walk: fails fast, and is kept
        raise PatternError(f"no token of this vocabulary can start a match of {keyword} {pattern[:80]!r}")
    return index


class IndexCache:
    """Token indexes by pattern, kept within a byte budget: the least recently used go first, never one in use.

    - get(pattern) / take(pattern) return the pattern's index. One the cache does not hold is
      compiled by `compiler` (build_index if None) with the `budget` given (if None, a
      Budget(limits) of its own, whose deadline starts with it); `compiles` counts the compiles started, a failed one too. A
      compile that raises (PatternError, CompileCancelled) raises here and leaves nothing held.
    - take marks the index in use until a matching give_back(pattern): two takes need two
      give_backs; a give_back with no take outstanding changes no count.
    - Recency: a get or a take (held or compiled) makes its pattern the most recently used;
      a give_back does not.
    - After each compile and each give_back: while the held indexes' bytes (the sum of their
      `nbytes`) are over `limits.cache_bytes`, the least recently used index not in use is
      dropped (`evictions` counts them). An index in use is never dropped, so the total may
      stay over the budget while they are used; the index get has just compiled may itself go
      (it is still returned).
    - Thread-safe: request workers take while the engine thread decodes. A compile holds no
      lock (get and take of other patterns are answered meanwhile); two threads compiling the
      same pattern at once both return the one index the cache keeps.
    """

    def __init__(self, vocabulary: Vocabulary, model_vocab_size: int, limits: Limits | None = None,
                 compiler: Callable[..., TokenIndex] | None = None):
        """`compiler`: build_index's stand-in (a server's ProcessCompiler); None compiles on the calling thread."""
        self.vocabulary, self.model_vocab_size = vocabulary, model_vocab_size
        self.limits = limits or Limits()
        self.compiler = compiler
        self._indexes: OrderedDict[str, TokenIndex] = OrderedDict()  # least recently used first
        self._users: Counter[str] = Counter()  # pattern -> takes not yet given back
        self._lock = threading.Lock()
        self.evictions = 0
        self.compiles = 0  # patterns compiled (a prepared request's start compiles nothing)

    def get(self, pattern: str, budget: Budget | None = None, keyword: str = "regex") -> TokenIndex:
        """The pattern's index, compiled within `budget` if it is not held (not marked in use)."""
        return self._get(pattern, budget, keyword, use=False)

    def take(self, pattern: str, budget: Budget | None = None, keyword: str = "regex") -> TokenIndex:
        """The pattern's index, marked in use until give_back(pattern): it is not evicted meanwhile."""
        return self._get(pattern, budget, keyword, use=True)

    # ANCHOR: cache
    def give_back(self, pattern: str) -> None:
        """One take of `pattern` fewer; then evict what the budget asks (see the class)."""
        # Idea: what does "in use" count, and when is the budget enforced?
        # Stuck? `miniyaie hint 8.6` prints hints, one level at a time.
        # TODO(Task 8.6): The index cache. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 6: The index cache — see book/src/ch08_structured_output.md')

    def _get(self, pattern: str, budget: Budget | None, keyword: str, use: bool) -> TokenIndex:
        """get (use=False) and take (use=True): see the class."""
        # Idea: a compile takes seconds: what may the lock cover, and what if another thread compiled it meanwhile?
        # Stuck? `miniyaie hint 8.6` prints hints, one level at a time.
        # TODO(Task 8.6): The index cache. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 6: The index cache — see book/src/ch08_structured_output.md')

    def _evict(self) -> None:
        """Drop the least recently used indexes nobody uses until the rest fit the byte budget (lock held)."""
        # Idea: which indexes may go, in which order, and when do you stop?
        # Stuck? `miniyaie hint 8.6` prints hints, one level at a time.
        # TODO(Task 8.6): The index cache. Replace this line with your code.
        raise NotImplementedError('Chapter 8, Task 6: The index cache — see book/src/ch08_structured_output.md')
    # ANCHOR_END: cache

    def _compile(self, pattern: str, budget: Budget, keyword: str) -> TokenIndex:
        started = time.perf_counter()
        with self._lock:
            self.compiles += 1
        index = (self.compiler or build_index)(pattern, budget, keyword, self.vocabulary, self.model_vocab_size)
        index.compile_seconds = time.perf_counter() - started
        return index

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(index.nbytes for index in self._indexes.values())

    def stats(self) -> dict:
        """What /stats shows: the bytes held against the budget, the indexes kept and in use."""
        with self._lock:
            return {"index_cache_bytes": sum(index.nbytes for index in self._indexes.values()),
                    "index_cache_budget_bytes": self.limits.cache_bytes, "indexes": len(self._indexes),
                    "indexes_in_use": len(self._users), "evictions": self.evictions, "compiles": self.compiles}
