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
        # Idea: one request, n completions, each with its own text machinery and its own engine id.
        # Stuck? `miniyaie hint 5.12` prints hints, one level at a time.
        # TODO(Task 5.12): The request lifecycle. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 12: The request lifecycle — see book/src/ch05_engine_loop.md')

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
        # Idea: the detokenizer may hold half a character back: when must it let go, and whose events ask for logprobs?
        # Stuck? `miniyaie hint 5.12` prints hints, one level at a time.
        # TODO(Task 5.12): The request lifecycle. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 12: The request lifecycle — see book/src/ch05_engine_loop.md')

    def abort(self, request: RequestState) -> None:
        """End the request now: its blocks come back; each completion not finished yet ends with
        "abort" and its caller hears it as any end (with the text still held back, no new token);
        a completion already finished keeps its reason; the caller then gets the result."""
        # Idea: the engine frees the blocks; the caller must still hear how each completion ended.
        # Stuck? `miniyaie hint 5.12` prints hints, one level at a time.
        # TODO(Task 5.12): The request lifecycle. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 12: The request lifecycle — see book/src/ch05_engine_loop.md')

    def drop(self, request: RequestState) -> None:
        """Forget a request that ends without a result (it failed, or nobody reads it): its blocks come
        back if it was started, none of its completions is tracked any more (request_of gives None,
        so a token event for it already on its way is ignored), and its caller is told nothing."""
        started = request.request_id in self._started
        self._started.discard(request.request_id)
        # Idea: undo start: the engine lets go of the request, the processor of its completions.
        # Stuck? `miniyaie hint 5.12` prints hints, one level at a time.
        # TODO(Task 5.12): The request lifecycle. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 12: The request lifecycle — see book/src/ch05_engine_loop.md')
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
        # Idea: the stop filter decides what is shown and whether the completion is over.
        # Stuck? `miniyaie hint 5.12` prints hints, one level at a time.
        # TODO(Task 5.12): The request lifecycle. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 12: The request lifecycle — see book/src/ch05_engine_loop.md')
        self.returned_tokens += len(token_ids)
        if request.finished:
            self._started.discard(request.request_id)  # ended: nothing left to abort or drop
    # ANCHOR_END: emit

    def _token_logprob(self, event: RequestEvent) -> TokenLogprob:
        """The chosen token's logprob and the best alternatives, each spelled as text and its real bytes."""
        return token_logprob(self.tokenizer, event.token_id, event.logprob, event.top_logprobs or [])
