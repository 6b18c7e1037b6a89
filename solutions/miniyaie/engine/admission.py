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
        # Nudge: check everything that can fail before touching any state: all or nothing.
        # Hint 1: A refused request must leave no trace, so the order is: every check first
        #   (check_request, then the ids of the request and of all its completions), and
        #   only then the first write. An id is in use while any structure still knows it:
        #   the scheduler (queued or running), the settings of a completion not forked or
        #   not finished yet, or a family of completions. After that, record what the step
        #   will need to read back per completion id.
        # Hint 2: Run check_request. Pick the id, build the list of completion ids (the request's
        #   own first), and refuse if any is in the scheduler's requests, in self._params or
        #   in self._family. Make the Request (max_tokens from max_tokens_for) and add it to
        #   the scheduler. For each completion i: params, stop ids (dict.fromkeys keeps the
        #   order and drops repeats), generator (seeded with seed + i: completion i differs from
        #   the others, and a rerun repeats it). Then the n > 1 bookkeeping and
        #   the counter; the structured guides after the region are given.
        # Hint 3:
        #   self.check_request(prompt, params)
        #   request_id = request_id if request_id is not None else f"req-{next(self._ids)}"
        #   ids = [request_id] + [child_request_id(request_id, i) for i in range(1, params.n)]
        #   if any id in scheduler.requests / self._params / self._family: raise InvalidRequestError
        #   scheduler.add_request(Request(request_id, prompt, max_tokens_for(...), tuple(eos), params.ignore_eos))
        #   for i, rid in enumerate(ids): _params, _stop_ids, _generators (Generator(device).manual_seed(seed + i))
        #   if n > 1: _children[request_id] = ids[1:]; _family[request_id] = ids
        #   counters["prompt_tokens"] += len(prompt)
        # BEGIN SOLUTION 5.10: At the door
        self.check_request(prompt, params)
        request_id = request_id if request_id is not None else f"req-{next(self._ids)}"
        ids = [request_id] + [child_request_id(request_id, i) for i in range(1, params.n)]
        taken = [rid for rid in ids if rid in self.scheduler.requests or rid in self._params or rid in self._family]
        if taken:
            raise InvalidRequestError(f"request id {taken[0]!r} is already in use")
        max_tokens = self.max_tokens_for(prompt, params)
        request = Request(request_id, prompt, max_tokens, tuple(eos_token_ids), params.ignore_eos)
        self.scheduler.add_request(request)
        stop_ids = tuple(dict.fromkeys(list(eos_token_ids) + list(params.stop_token_ids)))
        for index, rid in enumerate(ids):
            self._params[rid] = params
            self._stop_ids[rid] = stop_ids
            seeded = params.seed is not None
            # completion i of a seeded request draws from seed + i: reproducible, and the completions differ
            self._generators[rid] = torch.Generator(self.runner.device).manual_seed(params.seed + index) if seeded else None
        if params.n > 1:
            self._children[request_id] = ids[1:]
            self._family[request_id] = ids
        self.counters["prompt_tokens"] += len(prompt)
        # END SOLUTION
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
        # Nudge: refuse now what could never finish later; the worst case is what must fit.
        # Hint 1: A request admitted but impossible would wait forever or fail halfway, after
        #   using the engine: everything that can be known from the prompt, the parameters and
        #   the configuration is checked here. The KV check is about the worst case: the
        #   prompt once (its blocks are shared) plus every completion's longest output, after
        #   the context has capped max_tokens.
        # Hint 2: Test each rule (the prompt's emptiness and length, then its ids, then the
        #   worst case) and raise its error with a message that names the limit. A token id must be an int but not a bool (bool is a subclass of
        #   int) and inside the vocabulary. Compare len(prompt) + n * capped max_tokens with
        #   self.memory.capacity_tokens.
        # Hint 3:
        #   if not prompt: raise InvalidRequestError(...)
        #   if len(prompt) >= context: raise PromptTooLongRequestError(f"prompt has {len} tokens ... context is {context}")
        #   if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab ...): raise InvalidRequestError
        #   needed = len(prompt) + params.n * self.max_tokens_for(prompt, params)
        #   if needed > self.memory.capacity_tokens: raise ResourceExhaustedError(...)
        # BEGIN SOLUTION 5.10: At the door
        if not prompt:
            raise InvalidRequestError("the prompt is empty")
        if len(prompt) >= context:
            raise PromptTooLongRequestError(f"prompt has {len(prompt)} tokens but the model's context is {context} tokens")
        if any(isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < vocab for t in prompt):
            raise InvalidRequestError(f"prompt token ids must be whole numbers in [0, {vocab})")
        max_tokens = self.max_tokens_for(prompt, params)
        needed = len(prompt) + params.n * max_tokens
        if needed > self.memory.capacity_tokens:
            raise ResourceExhaustedError(
                f"the request needs up to {needed} tokens of KV cache (prompt {len(prompt)} + n={params.n} x "
                f"max_tokens {max_tokens}); the pool holds {self.memory.capacity_tokens}"
            )
        # END SOLUTION
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
        # Nudge: a request is a family; end every member the scheduler still runs, and forget them all.
        # Hint 1: The scheduler knows only the completions that run (the request itself, and
        #   completions already forked); the engine also knows completions not forked yet.
        #   Aborting a request must end the first kind in the scheduler (that frees their
        #   blocks) and forget both kinds (self._forget, below), so that every id is free.
        # Hint 2: The members are the family of request_id if it has one (take it out), else just
        #   request_id. A member is still live if the engine still holds its settings
        #   (self._params), forked or not. Abort each member in the scheduler (it ignores
        #   one it does not run) and forget each member (self._forget). True if any was live.
        # Hint 3:
        #   members = self._family.pop(request_id, [request_id])
        #   live = [rid for rid in members if rid in self._params]
        #   for rid in members: self.scheduler.abort(rid); self._forget(rid)
        #   return bool(live)
        # BEGIN SOLUTION 5.10: At the door
        members = self._family.pop(request_id, [request_id])
        live = [rid for rid in members if rid in self._params]
        for rid in members:
            self.scheduler.abort(rid)
            self._forget(rid)
        return bool(live)
        # END SOLUTION

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
        # Nudge: a completion of n > 1 is listed in two more places: its family and the completions still to fork.
        # Hint 1: The per-completion maps are cleared above (given). For n > 1 the id is also a
        #   member of its request's family and, until it is forked, in the list of completions
        #   to fork. A family that never empties keeps its request's id in use forever; an id
        #   still listed to fork would be forked later, even after a new request took that id.
        # Hint 2: Find the family that lists the id (if any); remove the id from that list and from
        #   the parent's _children list if it is there; delete the family when its list is empty.
        # Hint 3:
        #   parent = next((p for p, family in self._family.items() if request_id in family), None)
        #   if parent is not None: family.remove(request_id); _children[parent].remove(request_id) if listed; del empty family
        # BEGIN SOLUTION 5.10: At the door
        parent = next((p for p, family in self._family.items() if request_id in family), None)  # n > 1 only
        if parent is not None:  # the id leaves its family, so a new request may take it
            self._family[parent].remove(request_id)
            if request_id in self._children.get(parent, ()):
                self._children[parent].remove(request_id)  # aborted before it was forked: never fork it
            if not self._family[parent]:
                del self._family[parent]
        # END SOLUTION
    # ANCHOR_END: admission
