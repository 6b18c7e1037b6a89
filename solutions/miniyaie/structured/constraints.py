"""Structured output inside the engine: a guide per constrained completion, used at three points of a step.

    a worker     ── prepare(params) ──> the pattern compiled within the budgets, held for its start
    add_request  ── start(ids, params) ──> a Guide per completion (the pattern compiled once, cached)
    sampling row ── mask(id) ──> the allowed tokens, applied by chapter 5's sampler
    after update ── after_step(...) ──> advance each guide; finish what the pattern ended;
                                        append what the pattern forces (jump-forward)

LLMEngine knows nothing of patterns: it calls these four methods and
receives token ids, like any other tokens of a request.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from collections.abc import Callable

from miniyaie.structured.fsm import PatternError
from miniyaie.structured.guide import JSON_OBJECT, Guide, keyword_of, pattern_of
from miniyaie.structured.index_cache import IndexCache
from miniyaie.structured.limits import Budget, Limits
from miniyaie.structured.vocabulary import Vocabulary


class Constraints:
    def __init__(self, vocabulary: Vocabulary | Callable[[], Vocabulary] | None, model_vocab_size: int,
                 limits: Limits | None = None):
        self._vocabulary, self.model_vocab_size = vocabulary, model_vocab_size
        self.limits = limits or Limits()
        self._cache: IndexCache | None = None
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()  # pattern -> indexes prepared for a start still to come
        self._patterns: dict[str, str] = {}  # request id -> its guide's pattern (its index is in use)
        self.guides: dict[str, Guide] = {}
        self.forced_tokens = 0  # appended by jump-forward, without a model step
        self._compiler = None  # a ProcessCompiler once compile_in_process() is called (a server's)

    def _indexes(self) -> IndexCache:
        with self._lock:
            if self._cache is None:
                from miniyaie.engine.errors import InvalidRequestError

                if self._vocabulary is None:
                    raise InvalidRequestError("structured output needs the tokenizer's vocabulary (use "
                                              "InferenceEngine, or give LLMEngine a vocabulary)")
                vocabulary = self._vocabulary() if callable(self._vocabulary) else self._vocabulary
                self._cache = IndexCache(vocabulary, self.model_vocab_size, self.limits, self._compiler)
            return self._cache

    def compile_in_process(self, new_compiler) -> None:
        """Compile patterns in worker processes from now on: `new_compiler()` gives the workers (a server's
        ProcessCompiler, serving/compile_process.py), asked again once they are closed. A server's compiles then
        leave its GIL to the engine thread and the event loop. close() stops the workers."""
        with self._lock:
            if self._compiler is None or self._compiler.closed:
                self._compiler = new_compiler()
            if self._cache is not None:
                self._cache.compiler = self._compiler

    def close(self) -> None:
        """Stop the compile workers, if any (a compile still waiting raises CompileCancelled)."""
        if self._compiler is not None:
            self._compiler.close()

    def index(self, params):
        """The TokenIndex of a request's pattern (compiled once, cached): its size and build time, for measuring."""
        pattern = pattern_of(params, self.limits)
        return None if pattern is None else self._indexes().get(pattern, self._budget(params), keyword_of(params))

    def _budget(self, params, cancel: threading.Event | None = None) -> Budget:
        """The compile's budget: the limits' deadline for a client's pattern; none for json_object, the server's
        own fixed pattern (seconds, once: its cost is known and bounded), which a cancel still stops."""
        if params.json_schema == JSON_OBJECT:
            return Budget(dataclasses.replace(self.limits, compile_seconds=math.inf), cancel)
        return Budget(self.limits, cancel)

    def check(self, params) -> None:
        """Compile the request's pattern (cached); PatternError if it cannot constrain anything."""
        self.index(params)

    def prepare(self, params, cancel: threading.Event | None = None) -> None:
        """Compile the request's pattern within the budgets and hold its index for one start(..., params).

        From any thread. PatternError (an HTTP 400 naming the keyword and the limit) for a bad or too
        costly pattern; CompileCancelled soon after `cancel` is set. Unconstrained params: nothing to do.
        """
        pattern = pattern_of(params, self.limits)
        if pattern is None:
            return
        self._indexes().take(pattern, self._budget(params, cancel), keyword_of(params))
        with self._lock:
            self._held[pattern] += 1

    def release(self, params) -> None:
        """Drop a hold taken by prepare(params) that no start will consume (the request went away)."""
        pattern = pattern_of(params, self.limits)
        if pattern is not None and self._unhold(pattern):
            self._indexes().give_back(pattern)

    def _unhold(self, pattern: str) -> bool:
        with self._lock:
            if self._held[pattern] == 0:
                return False
            self._held[pattern] -= 1
            if self._held[pattern] == 0:
                del self._held[pattern]
            return True

    def stats(self) -> dict:
        """The index cache's bytes against its budget, indexes kept and in use (for the engine's /stats)."""
        if self._cache is None:
            return {"index_cache_bytes": 0, "index_cache_budget_bytes": self.limits.cache_bytes, "indexes": 0,
                    "indexes_in_use": 0, "evictions": 0, "compiles": 0}
        return self._cache.stats()

    # ANCHOR: start
    def start(self, ids: list[str], params) -> None:
        """A guide per completion id, each holding one use of the pattern's index until forget(id).

        Unconstrained params: nothing happens. Otherwise, afterwards: each id has a new guide that holds
        exactly one use, and an id that had a guide already has given its old use back. If a
        prepare(params) holds the pattern's index, start consumes that hold: its use is given back
        exactly once, even when a take raises. Invariant: every use the cache counts
        (`stats()["indexes_in_use"]`) is one guide's or one hold's. And start never makes the cache
        compile an index it held: even over a cache that keeps nothing unused, start after a prepare
        compiles nothing, and start(["r1"]) then start(["r1"]) of one pattern compiles once.
        """
        # Nudge: follow the index's use count in the cache through every line of start.
        # Hint 1: Every take must meet exactly one give_back: a leaked use pins an index for
        #   ever, an extra one lets the cache evict an index a guide still reads. The hold keeps
        #   the prepared index in use; give it back only after the guides have taken theirs, or
        #   the cache may drop it in between and compile it again.
        #   The same goes for an id that already has a guide: its old use may be the only one
        #   keeping the index, so it goes back after the new guide has taken its use.
        # Hint 2: Find the pattern (None: return). Consume a hold if there is one. Then, in a
        #   try whose finally gives back the hold's use if one was consumed: for each id, take
        #   the pattern's index and make its Guide, then forget the id (its old guide's use
        #   back), then store the new guide and remember the id's pattern.
        # Hint 3:
        #   pattern = pattern_of(params, limits); if None: return
        #   cache, held = self._indexes(), self._unhold(pattern)
        #   try: for rid in ids:
        #            guide = Guide(cache.take(pattern, budget, keyword)); forget(rid)
        #            guides[rid] = guide; _patterns[rid] = pattern
        #   finally: if held: cache.give_back(pattern)
        # BEGIN SOLUTION 8.6: The index cache
        pattern = pattern_of(params, self.limits)
        if pattern is None:
            return
        cache, held = self._indexes(), self._unhold(pattern)
        try:
            for rid in ids:
                guide = Guide(cache.take(pattern, self._budget(params), keyword_of(params)))
                self.forget(rid)  # a guide it may still have: its use back, now that the new one holds the index
                self.guides[rid], self._patterns[rid] = guide, pattern
        finally:
            if held:
                cache.give_back(pattern)
        # END SOLUTION
    # ANCHOR_END: start

    def mask(self, request_id: str):
        guide = self.guides.get(request_id)
        return None if guide is None else guide.allowed()

    # ANCHOR: after_step
    def after_step(self, sampled: dict[str, int], finished: dict[str, str], jump_forward: Callable[[str], bool],
                   room: Callable[[str], int]) -> tuple[dict[str, list[int]], dict[str, str], dict[str, Exception]]:
        """Advance the guides over this step's sampled tokens, and jump forward where asked.

        sampled: request id -> the token it sampled. finished: requests that ended this step for
        another reason (end of sequence, max_tokens, a stop string): left alone, guide unmoved.
        room(id): how many more tokens the request may take; jump_forward(id): whether it asked for
        jump-forward. Returns (forced, ended, failed):
        - forced[id]: the tokens appended without a model step (Task 8.7's forced_tokens), only for
          requests that asked and whose pattern is not complete, at most room(id) of them (the guide
          then stands after the tokens kept, not after every token the pattern forced); their number
          is added to self.forced_tokens. No entry where there are none.
        - ended[id]: "stop" where the pattern is complete (after the sampled and the kept forced
          tokens); otherwise "length" where no room is left after the forced tokens.
        - failed[id]: the exception where the request's guide raised (a token it refuses): that
          request alone fails; every other request gets what it would get without it.
        Example (tests): "xy" after sampling "x", with jump-forward and room 1: forced ["y"],
        ended "stop" (not "length").
        """
        # Nudge: in what order do a request's sampled token, forced tokens and end come, and what may one bad guide spoil?
        # Hint 1: Per request, in the order the text is written: the sampled token moves the
        #   guide, then (if asked, and the pattern is not complete) the forced tokens, cut to the
        #   room left. forced_tokens moves the guide over every token it returns, so a cut must
        #   put the guide back where the kept tokens leave it. Only then is it known whether the
        #   pattern is complete ("stop" wins over "length": the text is whole). A guide that raises
        #   fails its own request: catch per request, record it, and go on with the next, before
        #   anything of it is recorded.
        # Hint 2: For each sampled request with a guide and not in `finished`: in a try, advance
        #   the guide, then take forced_tokens() if it asked for jump-forward and the guide is not
        #   finished; if there are more than room, set the guide's state back to where it stood
        #   before them and advance it over the first room tokens only; on an exception record it
        #   in failed and continue. Record non-empty
        #   forced tokens (and count them); then "stop" if the guide is finished, else "length"
        #   if room minus the forced tokens is <= 0.
        # Hint 3:
        #   for rid, token in sampled: guide = guides.get(rid); skip if None or rid in finished
        #       try: guide.advance(token)
        #            before = guide.state
        #            tokens = guide.forced_tokens() if jump_forward(rid) and not guide.finished else []
        #            if len(tokens) > room(rid): tokens = tokens[:room(rid)]; guide.state = before; advance over tokens
        #       except Exception as exc: failed[rid] = exc; continue
        #       if tokens: forced[rid] = tokens; self.forced_tokens += len(tokens)
        #       if guide.finished: ended[rid] = "stop"
        #       elif room(rid) - len(tokens) <= 0: ended[rid] = "length"
        # BEGIN SOLUTION 8.7: Jump-forward
        forced, ended, failed = {}, {}, {}
        for rid, token in sampled.items():
            guide = self.guides.get(rid)
            if guide is None or rid in finished:
                continue
            try:
                guide.advance(token)
                before = guide.state
                tokens = guide.forced_tokens() if jump_forward(rid) and not guide.finished else []
                if len(tokens) > room(rid):  # cut: the guide stands after the tokens kept, not all it forced
                    tokens, guide.state = tokens[: room(rid)], before
                    for kept in tokens:
                        guide.advance(kept)
            except Exception as exc:  # noqa: BLE001 - handed to the request's caller (LLMEngine.step's events)
                failed[rid] = exc
                continue
            if tokens:
                forced[rid] = tokens
                self.forced_tokens += len(tokens)
            if guide.finished:
                ended[rid] = "stop"
            elif room(rid) - len(tokens) <= 0:
                ended[rid] = "length"
        return forced, ended, failed
        # END SOLUTION
    # ANCHOR_END: after_step

    def follow(self, engine, sampled: dict, finished: dict[str, str]) -> tuple[dict[str, list[int]], dict[str, Exception]]:
        """Structured output after the update: guides advance, forced tokens join their requests' outputs
        (computed in the next step, like prompt tokens), a request whose pattern is complete ends, and
        one whose guide failed is ended (its blocks come back); (forced tokens, failed requests)."""
        requests = engine.scheduler.requests
        room = lambda rid: requests[rid].max_tokens - len(requests[rid].output_token_ids)  # noqa: E731
        forced, ended, failed = self.after_step(
            {rid: s.token_id for rid, s in sampled.items()}, finished, lambda rid: engine._params[rid].jump_forward, room)
        if stray := sorted((forced.keys() | ended.keys() | failed.keys()) & finished.keys()):  # its request is gone
            raise RuntimeError(f"Task 8.7: after_step answered for {stray[0]!r}, which finished this step for another "
                               f"reason ({finished[stray[0]]!r}): a finished request is left alone (no forced tokens, "
                               "no end, no failure of its own)")
        for rid, exc in failed.items():
            failed[rid] = self._explained(rid, exc, requests[rid], engine._params[rid].min_tokens, engine._stop_ids[rid])
            engine.scheduler.abort(rid)
        for rid, tokens in forced.items():
            requests[rid].output_token_ids.extend(tokens)
        for rid, reason in ended.items():
            engine.scheduler.abort(rid)  # frees its blocks; the reason we report is the pattern's
            finished[rid] = reason
        engine.counters["forced_tokens"] += sum(map(len, forced.values()))
        engine.counters["output_tokens"] += sum(map(len, forced.values()))
        return forced, failed

    def _explained(self, rid: str, exc: Exception, request, min_tokens: int, stop_ids) -> Exception:
        """The real reason when min_tokens banned the only tokens the pattern allowed (its end)."""
        if not isinstance(exc, PatternError) or len(request.output_token_ids) >= min_tokens:
            return exc
        allowed = self.guides[rid].allowed().nonzero().flatten().tolist()
        if allowed and set(allowed) <= set(stop_ids):
            error = PatternError(f"the pattern is complete after {len(request.output_token_ids)} tokens and allows "
                                 f"nothing more, but min_tokens={min_tokens} asks for more: the two cannot both hold")
            error.__cause__ = exc
            return error
        return exc

    # ANCHOR: forget
    def forget(self, request_id: str) -> None:
        """Drop the request's guide and give back its use of the index (an id with none: nothing)."""
        # Nudge: what must forgetting an id twice, or an id that never had a guide, do to the cache?
        # Hint 1: The guide's use of the index is given back once: the id's pattern is the
        #   record that a use is outstanding, so taking it away and giving back go together.
        # Hint 2: Pop the id's guide; pop its pattern; if there was one, give the pattern back.
        # Hint 3:
        #   guides.pop(rid, None); pattern = _patterns.pop(rid, None)
        #   if pattern is not None: self._indexes().give_back(pattern)
        # BEGIN SOLUTION 8.6: The index cache
        self.guides.pop(request_id, None)
        pattern = self._patterns.pop(request_id, None)
        if pattern is not None:
            self._indexes().give_back(pattern)
        # END SOLUTION
    # ANCHOR_END: forget
