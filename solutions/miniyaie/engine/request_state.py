"""A request's life on the engine thread: tokens in, text out, stop strings, and what its caller is told.

LLMEngine speaks token ids; a caller wants text. For every token event of
a step, the request's completion pushes the token through its incremental
detokenizer (task 5.5) and the text through its stop-string filter (task
5.6); `_emit` (task 5.12) records the result and tells the caller:

    RequestEvent ──> detokenizer ──> stop strings ──> CompletionOutput
                                                     └─> caller: CompletionDelta ... GenerationOutput

A completion ends when the engine finishes it ("stop", "length"), when a
stop string appears ("stop", and its blocks come back at once), or when its
request is aborted ("abort"). When every completion has ended the caller
gets the GenerationOutput. vLLM calls this part its output processor.
Everything here runs on the engine thread only (see engine_loop.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from miniyaie.engine.detokenizer import IncrementalDetokenizer
from miniyaie.engine.admission import child_request_id
from miniyaie.engine.llm_engine import LLMEngine
from miniyaie.engine.outputs import CompletionDelta, CompletionOutput, GenerationOutput, RequestEvent, TokenLogprob
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.sink import Sink
from miniyaie.engine.stop_strings import StopStringFilter
from miniyaie.engine.token_text import token_logprob


@dataclass
class CompletionState:
    """One completion of a request: its id in the LLMEngine, its text so far and what is held back."""

    engine_id: str
    index: int
    detokenizer: IncrementalDetokenizer
    stops: StopStringFilter
    output: CompletionOutput


@dataclass
class RequestState:
    """One request of a caller: what it asked, where its answers go, and its completions."""

    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    params: SamplingParams
    sink: Sink
    deltas: bool  # send a CompletionDelta per token (streams), or only the result
    completions: list[CompletionState] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens whose K/V came from the prefix cache

    @property
    def finished(self) -> bool:
        return all(c.output.finish_reason is not None for c in self.completions)

    def result(self) -> GenerationOutput:
        outputs = [c.output for c in self.completions]
        return GenerationOutput(self.request_id, self.prompt, self.prompt_token_ids, outputs, self.cached_tokens)


class OutputProcessor:
    """The requests started in an LLMEngine, by engine id, and the step from their tokens to their callers."""

    def __init__(self, llm: LLMEngine, tokenizer, eos_token_ids: list[int], tell: Callable[[RequestState, object], None]):
        self.llm = llm
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.tell = tell  # hands a CompletionDelta or the GenerationOutput to the request's caller
        self._by_engine_id: dict[str, tuple[RequestState, CompletionState]] = {}
        self._started: set[str] = set()  # request ids added to the LLMEngine and not dropped yet
        # Tokens the callers got. The LLMEngine counts every token its steps emit, and a stop string can end a
        # completion before the last of them (a speculative step emits several tokens of one completion).
        self.returned_tokens = 0

    # ANCHOR: processor
    def start(self, request: RequestState) -> None:
        """Add the request to the LLMEngine and track each of its n completions.

        If the LLMEngine refuses the request, its error goes up and nothing is tracked. Otherwise
        request.completions gets n CompletionStates in index order, each with its own incremental
        detokenizer (request.params.skip_special_tokens), stop-string filter (request.params.stop)
        and CompletionOutput (logprobs [] when the request asks for them, None otherwise), and the
        processor finds each by its engine id: the request id for completion 0,
        child_request_id(request id, i) for the others. The request counts as started (`drop`).
        """
        # Nudge: one request, n completions, each with its own text machinery and its own engine id.
        # Hint 1: The LLMEngine knows completions by id and sends one event per token of each; the
        #   caller knows one request. So every completion needs its own detokenizer and stop
        #   filter (their text differs) and an entry that maps its engine id back to the request
        #   and the completion. Add to the engine first: if it refuses, nothing must be tracked.
        # Hint 2: Call self.llm.add_request with the prompt ids, params, self.eos_token_ids and the
        #   request id. Add the id to self._started. For index in range(n): engine id, a
        #   CompletionState(engine id, index, IncrementalDetokenizer(tokenizer, skip_special_tokens),
        #   StopStringFilter(stop), CompletionOutput(index, logprobs=...)); append it and map the
        #   engine id to (request, completion) in self._by_engine_id.
        # Hint 3:
        #   self.llm.add_request(request.prompt_token_ids, request.params, self.eos_token_ids, request.request_id)
        #   self._started.add(request.request_id)
        #   for index in range(n): engine_id = request_id if index == 0 else child_request_id(request_id, index)
        #       completion = CompletionState(engine_id, index, IncrementalDetokenizer(...), StopStringFilter(...), CompletionOutput(...))
        #       request.completions.append(completion); self._by_engine_id[engine_id] = (request, completion)
        # BEGIN SOLUTION 5.12: The request lifecycle
        self.llm.add_request(request.prompt_token_ids, request.params, self.eos_token_ids, request.request_id)
        self._started.add(request.request_id)
        for index in range(request.params.n):
            engine_id = request.request_id if index == 0 else child_request_id(request.request_id, index)
            completion = CompletionState(
                engine_id, index, IncrementalDetokenizer(self.tokenizer, request.params.skip_special_tokens),
                StopStringFilter(request.params.stop),
                CompletionOutput(index, logprobs=[] if request.params.logprobs is not None else None),
            )
            request.completions.append(completion)
            self._by_engine_id[engine_id] = (request, completion)
        # END SOLUTION

    def request_of(self, engine_id: str) -> RequestState | None:
        """The request a token event belongs to; None once it has ended (aborted or failed while the step ran)."""
        entry = self._by_engine_id.get(engine_id)
        return entry[0] if entry is not None else None

    def on_event(self, event: RequestEvent) -> None:
        """One new token of one completion, turned into text and handed to `_emit`.

        A failed completion's event carries its error: raise it (the engine loop's fault
        boundary then ends this request alone). Otherwise: the request's cached_tokens is what
        completion 0's events report; the text handed on never holds half a character while the
        completion runs, and once an event finishes it, the completion's text is all of its
        tokens' text (as decoding them at once gives, an unfinished last character as U+FFFD);
        a logprob entry (self._token_logprob) is made only for a completion that records
        logprobs; _emit gets the token, its text, the event's finish_reason and that entry.
        """
        # Nudge: the detokenizer may hold half a character back: when must it let go, and whose events ask for logprobs?
        # Hint 1: Events come per completion (by engine id), text is made per completion. The
        #   detokenizer may hold text back (half a character) and only releases it when told that
        #   no more tokens come; a finishing event is that moment. Logprob entries cost a
        #   tokenizer lookup per token and alternative: make them only for a completion that asked.
        # Hint 2: Raise event.error if there is one. Look up (request, completion) by
        #   event.request_id. If completion.index is 0, copy event.cached_tokens to the request.
        #   logprob = self._token_logprob(event) if completion.output.logprobs is not None. text =
        #   detokenizer.push([token]); if the event finishes, add detokenizer.finish(). Call _emit.
        # Hint 3:
        #   if event.error is not None: raise event.error
        #   request, completion = self._by_engine_id[event.request_id]
        #   if completion.index == 0: request.cached_tokens = event.cached_tokens
        #   text = completion.detokenizer.push([event.token_id]) (+ .finish() when event.finish_reason)
        #   self._emit(request, completion, [event.token_id], text, event.finish_reason, logprob)
        # BEGIN SOLUTION 5.12: The request lifecycle
        if event.error is not None:
            raise event.error
        request, completion = self._by_engine_id[event.request_id]
        if completion.index == 0:
            request.cached_tokens = event.cached_tokens
        logprob = self._token_logprob(event) if completion.output.logprobs is not None else None
        text = completion.detokenizer.push([event.token_id])
        if event.finish_reason is not None:
            text += completion.detokenizer.finish()
        self._emit(request, completion, [event.token_id], text, event.finish_reason, logprob)
        # END SOLUTION

    def abort(self, request: RequestState) -> None:
        """End the request now: its blocks come back; each completion not finished yet ends with
        "abort" and its caller hears it as any end (with the text still held back, no new token);
        a completion already finished keeps its reason; the caller then gets the result."""
        # Nudge: the engine frees the blocks; the caller must still hear how each completion ended.
        # Hint 1: Aborting in the LLMEngine ends every completion there at once, but the caller
        #   waits for each completion's end and then for the result: a completion that simply
        #   vanished would leave it waiting. Completions that had already finished keep their
        #   reason.
        # Hint 2: self.llm.abort(request id). For each completion whose output has no
        #   finish_reason yet: _emit it with no tokens, its detokenizer's finish() as the text and
        #   "abort" as the reason.
        # Hint 3:
        #   self.llm.abort(request.request_id)
        #   for c in request.completions:
        #       if c.output.finish_reason is None: self._emit(request, c, [], c.detokenizer.finish(), "abort")
        # BEGIN SOLUTION 5.12: The request lifecycle
        self.llm.abort(request.request_id)
        for c in request.completions:
            if c.output.finish_reason is None:
                self._emit(request, c, [], c.detokenizer.finish(), "abort")
        # END SOLUTION

    def drop(self, request: RequestState) -> None:
        """Forget a request that ends without a result (it failed, or nobody reads it): its blocks come
        back if it was started, none of its completions is tracked any more (request_of gives None,
        so a token event for it already on its way is ignored), and its caller is told nothing."""
        started = request.request_id in self._started
        self._started.discard(request.request_id)
        # Nudge: undo start: the engine lets go of the request, the processor of its completions.
        # Hint 1: Two cases reach here: a request that failed (its caller gets the error from the
        #   engine loop) and one whose caller went away. Either way no result will be sent: end
        #   it in the engine if it was started (that frees its blocks) and forget every
        #   completion, silently.
        # Hint 2: If it was started (`started`, given above): self.llm.abort(its id). Pop each
        #   completion's engine id from self._by_engine_id.
        # Hint 3:
        #   if started: self.llm.abort(request.request_id)
        #   for c in request.completions: self._by_engine_id.pop(c.engine_id, None)
        # BEGIN SOLUTION 5.12: The request lifecycle
        if started:
            self.llm.abort(request.request_id)
        for c in request.completions:
            self._by_engine_id.pop(c.engine_id, None)
        # END SOLUTION
    # ANCHOR_END: processor

    # ANCHOR: emit
    def _emit(self, request: RequestState, c: CompletionState, token_ids: list[int], text: str, finish: str | None,
              logprob: TokenLogprob | None = None) -> None:
        """Record a completion's new tokens and text; stop strings cut it; tell the caller.

        `finish` is the engine's reason ("stop", "length", "abort") or None while it runs.
        Invariants: the caller sees only text that cannot be part of a stop string;
        a stop string found ends the completion with "stop" (even on its last token),
        and the engine stops computing it at once, its blocks returned; when a
        completion ends otherwise, the text held back is released; its tokens and
        logprob are recorded; once finished, the completion (by its engine id, which
        differs from the request id when n > 1) is no longer tracked. A caller that asked
        for deltas hears a CompletionDelta of what was shown; once every completion of
        the request has finished, it hears the request's result.
        """
        # Nudge: the stop filter decides what is shown and whether the completion is over.
        # Hint 1: Text passes through the completion's stop filter before anyone sees it. The
        #   filter can end the completion before the engine knows (then the engine must be told,
        #   or it keeps computing and holding blocks), and it holds back a tail that must be
        #   released when the completion ends for another reason. A stop string wins over
        #   "length" when both happen on the same token.
        # Hint 2: Push the text through c.stops. If the filter stopped: tell the engine to finish
        #   c.engine_id when finish is None, and set finish to "stop". Else, when finish is set,
        #   add the filter's flushed tail to the shown text. Append tokens, shown text and the
        #   logprob to c.output. When finished, set the finish reason and forget c.engine_id.
        #   Then tell the caller: a delta if it asked for deltas; once the whole request has
        #   finished, its result.
        # Hint 3:
        #   shown = c.stops.push(text)
        #   if c.stops.stopped: (finish is None and self.llm.finish(c.engine_id)); finish = "stop"
        #   elif finish is not None: shown += c.stops.flush()
        #   c.output.token_ids += token_ids; c.output.text += shown; logprob -> c.output.logprobs
        #   if finish is not None: c.output.finish_reason = finish; self._by_engine_id.pop(c.engine_id, None)
        #   if request.deltas: self.tell(request, CompletionDelta(request_id, index, shown, token_ids, finish, [logprob] or None))
        #   if request.finished: self.tell(request, request.result())
        # BEGIN SOLUTION 5.12: The request lifecycle
        shown = c.stops.push(text)
        if c.stops.stopped:
            if finish is None:
                self.llm.finish(c.engine_id)  # its blocks come back now
            finish = "stop"
        elif finish is not None:
            shown += c.stops.flush()
        c.output.token_ids += token_ids
        c.output.text += shown
        if logprob is not None:
            c.output.logprobs.append(logprob)
        if finish is not None:
            c.output.finish_reason = finish
            self._by_engine_id.pop(c.engine_id, None)
        if request.deltas:
            self.tell(request, CompletionDelta(request.request_id, c.index, shown, token_ids, finish,
                                               [logprob] if logprob is not None else None))
        if request.finished:
            self.tell(request, request.result())
        # END SOLUTION
        self.returned_tokens += len(token_ids)
        if request.finished:
            self._started.discard(request.request_id)  # ended: nothing left to abort or drop
    # ANCHOR_END: emit

    def _token_logprob(self, event: RequestEvent) -> TokenLogprob:
        """The chosen token's logprob and the best alternatives, each spelled as text and its real bytes."""
        return token_logprob(self.tokenizer, event.token_id, event.logprob, event.top_logprobs or [])
