"""The engine's door: admit a request whole or refuse it with nothing changed, and end one on demand.

Mixed into LLMEngine (chapter 5, Task 5.10). What add_request records per
completion id (its params, stop ids, generator, and for n > 1 its family)
is what the step reads back; abort and _forget are where it all goes away
again, so that a finished or aborted id leaves no trace and can be reused.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from miniyaie.engine.errors import InvalidRequestError, PromptTooLongRequestError, ResourceExhaustedError
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.model import SamplingParams as BasicSamplingParams
from miniyaie.scheduler import Request

_FIRST_USE = threading.Lock()  # LLMEngine.constraints is made on first use, maybe from a server's worker thread


def child_request_id(request_id: str, index: int) -> str:
    """The id of completion `index` (>= 1) of a request with n > 1."""
    return f"{request_id}#{index}"


class Admission:
    """Mixed into LLMEngine: needs self.model, self.scheduler, self.memory, self.runner, self.counters, the
    per-completion maps (_params, _stop_ids, _generators, _prompt_cached, _children, _family), self._ids,
    self._constraints and the constraints property, self.speculation and self.lora (chapters 9 and 11, or None)."""

    # ANCHOR: admission
    def add_request(
        self,
        prompt_token_ids: Sequence[int],
        params: SamplingParams | BasicSamplingParams | None = None,
        eos_token_ids: Sequence[int] = (),
        request_id: str | None = None,
    ) -> str:
        """Queue a request and return its id ("req-0", "req-1", ... when none is given).

        Refused, with nothing changed (no request queued, no counter moved, every id still free):
        a request check_request refuses, and one whose id, or the id of one of its completions
        (child_request_id(request_id, i) for i in 1..n-1), is still in use by a request or
        completion that has not ended (InvalidRequestError, "already in use").
        Accepted, what the step (Task 5.11) reads back:
        - the scheduler holds a Request of the prompt with max_tokens_for(prompt, params),
          eos_token_ids and ignore_eos;
        - for every completion id: self._params[id] its params; self._stop_ids[id] the ids that
          end it (eos_token_ids and params.stop_token_ids); self._generators[id] None for an
          unseeded request, else a torch.Generator on the runner's device of its own, such that
          a seeded request's completions differ from each other and the same seed repeats them;
        - with n > 1: self._children[request_id] the completion ids still to fork (all but the
          request's own), self._family[request_id] all of its completion ids;
        - counters["prompt_tokens"] is the number of prompt tokens of all requests accepted.
        A structured request's guides are started after your part (given).
        """
        params = SamplingParams.coerce(params)
        prompt = list(prompt_token_ids)
        # Idea: check everything that can fail before touching any state: all or nothing.
        # Stuck? `miniyaie hint 5.10` prints hints, one level at a time.
        # TODO(Task 5.10): At the door. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 10: At the door — see book/src/ch05_engine_loop.md')
        if params.structured:  # chapter 8: a guide per completion (given)
            self.constraints.start([request_id] + [child_request_id(request_id, i) for i in range(1, params.n)], params)
        if params.adapter is not None:  # chapter 11: parked until its adapter is resident (lora_serving/residency.py)
            self.lora.admit(request_id, params)
        return request_id

    def max_tokens_for(self, prompt: Sequence[int], params: SamplingParams) -> int:
        """max_tokens, capped so that prompt + output fit the model's context."""
        return min(params.max_tokens, self.model.config.max_position_embeddings - len(prompt))

    def check_request(self, prompt: Sequence[int], params: SamplingParams, *, pattern: bool = True) -> None:
        """Refuse a request that can never run here; reads the configuration only, changes nothing.

        Refused (for any one of the reasons, when several hold): an empty prompt
        (InvalidRequestError); a prompt of at least the model's
        context length (PromptTooLongRequestError, naming both lengths); a token id that is not a
        whole number in [0, vocab_size), bools included (InvalidRequestError); and a request whose
        worst case, len(prompt) + n * max_tokens_for(prompt, params), exceeds the pool's capacity in
        tokens (ResourceExhaustedError, naming what it needs and what the pool holds). A bad
        structured pattern is refused after these, by chapter 8's code (given; pattern=False leaves it to
        prepare_request), and then an adapter the engine does not serve (InvalidRequestError listing those it
        serves; chapter 11).
        """
        context = self.model.config.max_position_embeddings
        vocab = self.model.config.vocab_size
        # Idea: refuse now what could never finish later; the worst case is what must fit.
        # Stuck? `miniyaie hint 5.10` prints hints, one level at a time.
        # TODO(Task 5.10): At the door. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 10: At the door — see book/src/ch05_engine_loop.md')
        if params.structured and pattern:  # chapter 8 compiles the pattern (cached): a bad one is refused here (given)
            self.constraints.check(params)
        served = list(self.lora.paths) if self.lora is not None else []  # chapter 11's adapters
        if params.adapter is not None and params.adapter not in served:
            raise InvalidRequestError(f"unknown adapter {params.adapter!r}; this engine serves "
                                      + (", ".join(map(repr, served)) if served else "no adapters (lora_adapters is empty)"))

    def prepare_request(self, prompt: Sequence[int], params: SamplingParams,
                        cancel: threading.Event | None = None) -> None:
        """check_request for a thread other than the engine's: the pattern is compiled there and held for this
        request's add_request, so the engine's step never waits for a compile (Constraints.prepare); setting
        `cancel` stops the compile soon (CompileCancelled). A request prepared and then not added must be
        released (release_request)."""
        params = SamplingParams.coerce(params)
        self.check_request(list(prompt), params, pattern=False)
        if params.structured:
            with _FIRST_USE:  # the first structured request makes the Constraints: once, whichever thread comes
                constraints = self.constraints
            constraints.prepare(params, cancel)

    def release_request(self, params: SamplingParams) -> None:
        """Drop what prepare_request holds for a request that will not be added after all (any thread)."""
        params = SamplingParams.coerce(params)
        if params.structured:
            self.constraints.release(params)

    def abort(self, request_id: str) -> bool:
        """End a request and all its completions now, freeing their blocks; True if any of them was
        live (forked or not yet), False if the id is unknown or already ended.

        The id of one completion (n > 1) ends that completion alone (one not forked yet is then
        never forked). Afterwards every id aborted is free for a new request. Requests whose ids
        merely start with request_id (x2, x#1 of another x) are untouched.
        """
        self._children.pop(request_id, None)  # its completions not forked yet: none will be
        # Idea: a request is a family; end every member the scheduler still runs, and forget them all.
        # Stuck? `miniyaie hint 5.10` prints hints, one level at a time.
        # TODO(Task 5.10): At the door. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 10: At the door — see book/src/ch05_engine_loop.md')

    def _forget(self, request_id: str) -> None:
        """Drop a finished or aborted completion's settings (and its guide) and take it out of its
        request's family (the family goes with its last member), so its id is free again.

        Afterwards request_id is in none of the per-completion maps; if it belonged to a family
        (n > 1), it is no longer a member, nor among the completions still to fork; a family
        left with no member is dropped. Forgetting an id the engine does not know changes nothing.
        """
        self._params.pop(request_id, None)
        self._generators.pop(request_id, None)
        self._stop_ids.pop(request_id, None)
        self._prompt_cached.pop(request_id, None)
        if self._constraints is not None:  # chapter 8's guides
            self._constraints.forget(request_id)
        if self.speculation is not None:  # chapter 9's draft model gives back its blocks
            self.speculation.forget(request_id)
        if self.lora is not None:  # chapter 11: its adapter, its place among those waiting for one
            self.lora.forget(request_id)
        # Idea: a completion of n > 1 is listed in two more places: its family and the completions still to fork.
        # Stuck? `miniyaie hint 5.10` prints hints, one level at a time.
        # TODO(Task 5.10): At the door. Replace this line with your code.
        raise NotImplementedError('Chapter 5, Task 10: At the door — see book/src/ch05_engine_loop.md')
    # ANCHOR_END: admission
