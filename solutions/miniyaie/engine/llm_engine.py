"""The engine: requests in, tokens out, one scheduled step at a time.

    add_request -> Scheduler.schedule -> ModelRunner.run (forward + Sampler) -> Scheduler.update

The scheduler (chapter 1) decides who runs, the paged memory (chapter 2,
with the radix prefix cache of chapter 3 when enabled) holds their K/V, and
the model (chapter 0) computes over it. This class works in token ids and
is not thread-safe; `InferenceEngine` adds text, threads and async on top.

Parallel sampling (n > 1): completion 0 is the request itself. Right after
its prompt's prefill the other n - 1 completions are sampled from the same
logits row and join the running batch on the prompt's blocks
(`PagedMemory.fork`): the prompt is computed once, and a shared block is
copied only when a completion writes into it. The engine remembers each
request's completions by name, so aborting a request ends its completions
and nothing else. The door (add_request, check_request, abort) is admission.py.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import torch

from miniyaie.engine.admission import Admission
from miniyaie.backends.choose import kv_cache_dtype, use_backend
from miniyaie.engine.config import EngineConfig
from miniyaie.backends.cuda_graphs import decode_graphs_mode, kv_budget_bytes, make_decode_graphs
from miniyaie.backends.overlap import OverlapScheduling
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.engine.offline_generate import OfflineGeneration
from miniyaie.engine.outputs import RequestEvent, StepRecord
from miniyaie.engine.plugins import LORA, SPECULATIVE, STRUCTURED_OUTPUT, plugin
from miniyaie.engine.sampler import SampledToken, SamplingRow
from miniyaie.engine.sampling_params import SamplingParams
from miniyaie.engine.step_accounting import StepAccounting
from miniyaie.model import CausalLM
from miniyaie.paged import PagedMemory, make_pool, num_blocks_for_budget
from miniyaie.radix import RadixMemory
from miniyaie.scheduler import Request, ScheduledChunk, Scheduler, SchedulerConfig, SchedulerOutput


class LLMEngine(Admission, StepAccounting, OfflineGeneration, OverlapScheduling):
    def __init__(self, model: CausalLM, config: EngineConfig = EngineConfig(), vocabulary=None, decode_graphs="auto",
                 draft_model: CausalLM | None = None):
        """`draft_model`: the proposer's model when config.speculative is "draft" (chapter 9).
        `vocabulary`: the tokenizer's tokens as bytes (a miniyaie.structured.Vocabulary, or a function
        that makes one on first use), needed only by requests with structured output (chapter 8).
        `decode_graphs`: auto, off, or eager (CPU tests): see miniyaie/backends/cuda_graphs.py's decode_graphs_mode."""
        self.model, self.config = model, config
        self._vocabulary, self._constraints = vocabulary, None
        dtype, device = model.lm_head.weight.dtype, model.lm_head.weight.device
        graphs = decode_graphs_mode(decode_graphs, config, device)  # off the KV budget
        dtype = kv_cache_dtype(config.kv_cache_dtype, dtype, config.attention_backend, device)  # the pool's from here on
        num_blocks = config.num_blocks or num_blocks_for_budget(model.config, kv_budget_bytes(config, graphs), config.block_size, dtype)
        memory_class = RadixMemory if config.enable_prefix_caching else PagedMemory
        self.memory = memory_class(num_blocks, config.block_size)
        self.pool = make_pool(model.config, num_blocks + (graphs in ("cuda", "eager")), config.block_size, dtype, device)  # + scratch
        scheduler_config = SchedulerConfig(
            config.max_num_batched_tokens, config.max_num_seqs, config.policy,
            decode_reserve=config.decode_reserve, hold_shared_prefix=config.enable_prefix_caching,
            long_prefill_token_threshold=config.long_prefill_token_threshold,
            max_long_partial_prefills=config.max_long_partial_prefills,
        )
        self.scheduler = Scheduler(scheduler_config, self.memory)
        use_backend(model, config.attention_backend, device, config.quantization)
        self.runner = ModelRunner(model, self.pool, self.memory)
        self.runner.decode_graphs = make_decode_graphs(graphs, model, self.pool, num_blocks, config)
        self._params: dict[str, SamplingParams] = {}
        self._generators: dict[str, torch.Generator | None] = {}
        self._stop_ids: dict[str, tuple[int, ...]] = {}  # end-of-sequence + stop_token_ids
        self._children: dict[str, list[str]] = {}  # n > 1: completions not forked yet
        self._family: dict[str, list[str]] = {}  # n > 1: a request's id -> the ids of all its completions
        self._prompt_cached: dict[str, int] = {}  # prompt tokens found in the prefix cache at a request's first admission
        self._ids = itertools.count()
        self.on_step: Callable[[StepRecord], None] | None = None  # called after every step (tracing)
        self.counters = dict(
            steps=0, prompt_tokens=0, computed_tokens=0, cached_tokens=0, resumed_cached_tokens=0, output_tokens=0,
            max_used_blocks=0, finished_requests=0, forked_requests=0, forced_tokens=0, overlapped_steps=0,
            draft_tokens=0, accepted_draft_tokens=0, verified_steps=0, speculation_off_steps=0,  # chapter 9
        )
        # chapter 11's plugin: adapters' slots, loads and each step's rows (lora_serving/residency.py); None without adapters
        self.lora = plugin(LORA).attach(self) if config.lora_adapters else None
        self.speculation = None
        if config.speculative is not None:  # chapter 9's plugin: drafts verified in the step (speculative/step.py)
            self.runner = plugin(SPECULATIVE).speculative_runner(config, self.runner, self.memory, self.counters, draft_model)
            self.speculation = self.runner.speculation

    # ------------------------------------------------------------ requests

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished() or self._in_flight is not None or (self.lora is not None and self.lora.waiting)

    def _row(self, request_id: str, request: Request) -> SamplingRow:
        """`request_id`'s sampling settings over `request`'s tokens (a forked completion reads its parent's)."""
        params, stops, generator = self._params[request_id], self._stop_ids[request_id], self._generators[request_id]
        allowed = self._constraints.mask(request_id) if self._constraints is not None else None
        return SamplingRow(params, request.prompt_token_ids, request.output_token_ids, stops, generator, allowed)

    @property
    def constraints(self):
        """Structured output's guides (chapter 8), made when the first constrained request comes."""
        if self._constraints is None:  # chapter 8's plugin (engine/plugins.py); PluginMissingError without one
            structured = plugin(STRUCTURED_OUTPUT)
            self._constraints = structured.constraints(self._vocabulary, self.model.config.vocab_size,
                                                       dict(self.config.structured_limits))
        return self._constraints

    # ------------------------------------------------------------ one step
    # ANCHOR: step
    def step(self) -> list[RequestEvent]:
        """Schedule, run the model once, record the new tokens. Returns (request, token, finish) events:
        with overlap scheduling (backends/overlap.py) those of the step before, recorded while this one runs."""
        return self._overlap_step() if self.config.overlap_schedule else self._plain_step()

    def _plain_step(self) -> list[RequestEvent]:
        started = time.perf_counter()
        was_running = {r.request_id for r in self.scheduler.running}
        events = self.lora.before_schedule() if self.lora is not None else []  # chapter 11: adapters loaded, or failed
        if self.speculation is not None:
            self.speculation.propose(self.scheduler.running, len(self.scheduler.waiting), self._may_speculate)
        out = self.scheduler.schedule()
        if self.speculation is not None:
            self.speculation.keep_scheduled(out)
        if out.is_empty:
            return events
        if self.lora is not None:
            self.lora.set_step(out)  # each row's adapter slot, before the forward
        used_blocks = self.memory.num_used_blocks  # the step's peak: before finished requests free theirs
        cached = self._note_admissions(out, was_running)  # before any fork: a completion shares its prompt's hit
        sampled, finished = self._sample_and_record(out)
        forced, failed = self._constraints.follow(self, sampled, finished) if self._constraints is not None else ({}, {})
        self._count_step(out, started, used_blocks, cached, sampled, finished)
        for rid, s in sampled.items():
            if rid in failed:  # ended by its own fault (its blocks are back): the event carries the error
                events.append(RequestEvent(rid, s.token_id, None, error=failed[rid]))
                continue
            for early in self.speculation.accepted.get(rid, ()) if self.speculation is not None else ():
                events.append(self._event(rid, early, None, self._prompt_cached.get(rid, 0)))  # accepted drafts
            last = finished.get(rid) if rid not in forced else None
            events.append(self._event(rid, s, last, self._prompt_cached.get(rid, 0)))
            for i, token in enumerate(forced.get(rid, ())):  # jump-forward: tokens the pattern forced
                last = finished.get(rid) if i == len(forced[rid]) - 1 else None
                events.append(self._event(rid, SampledToken(token), last, self._prompt_cached.get(rid, 0)))
        for rid in (*finished, *failed):
            self._forget(rid)
        return events

    def _sample_and_record(self, out: SchedulerOutput) -> tuple[dict[str, SampledToken], dict[str, str]]:
        """Run the non-empty step `out` and record its tokens: returns (sampled, finished).

        `sampled` maps request id -> SampledToken for every chunk that reaches its end and
        every completion forked this step; `finished` maps request id -> "stop" | "length".
        The scheduler records every sampled token (and finishes and frees on EOS or
        max_tokens). n > 1: the other completions fork after the prompt's last chunk,
        sample from its logits with their own settings and share its blocks. A token
        in stop_token_ids ends a request with "stop" (even with ignore_eos).
        """
        # Nudge: the order is the design: a forked completion needs its parent's logits and its parent's blocks.
        # Hint 1: Three pieces do the heavy work: self.runner.run (Task 5.9: batch, forward,
        #   sampler), self.scheduler.update (chapter 1: append tokens, finish, free) and
        #   self._fork (yours, below: a completion joins on its parent's blocks). The order is the design:
        #   a forked completion's first token comes from its parent's prompt logits, so its
        #   row must be in this step's run; it must be forked before the update (the update may
        #   finish the parent and free its blocks) and be part of that update (that records its
        #   first token). Stop tokens are not the scheduler's business: check them last
        #   (self._stop_token_finishes, also yours).
        # Hint 2: Collect the requests whose chunk samples; make a SamplingRow for each
        #   (self._row). For those with unforked completions (self._children), take the list
        #   (self._unforked_children) as the fanout and add a row for each child, over the
        #   parent's tokens. Run the runner. Fork every child (self._fork gives its zero-token
        #   chunk). Update the scheduler with the step's chunks plus the children's
        #   chunks, the step's preempted list and the sampled token ids; its finished requests
        #   give their finish_reason.value. Add self._stop_token_finishes.
        # Hint 3:
        #   sampling = [c.request for c in out.chunks if c.samples_next_token]
        #   rows = {r.request_id: self._row(r.request_id, r) for r in sampling}
        #   fanout = {r.request_id: self._unforked_children(r.request_id) for r in sampling if r.request_id in self._children}
        #   for parent_id, children in fanout.items(): rows[child] = self._row(child, parent) for each child
        #   sampled = self.runner.run(out, rows, fanout)
        #   child_chunks = [self._fork(parent_id, child) for each parent_id, child]
        #   done = self.scheduler.update(SchedulerOutput(out.chunks + child_chunks, out.preempted), {rid: s.token_id ...})
        #   finished = {r.request_id: r.finish_reason.value for r in done}; finished.update(self._stop_token_finishes(sampled, finished))
        #   return sampled, finished
        # BEGIN SOLUTION 5.11: The engine step
        sampling = [c.request for c in out.chunks if c.samples_next_token]
        rows = {r.request_id: self._row(r.request_id, r) for r in sampling}
        fanout = {r.request_id: self._unforked_children(r.request_id) for r in sampling if r.request_id in self._children}
        for parent_id, children in fanout.items():
            parent = self.scheduler.requests[parent_id]
            rows.update({child: self._row(child, parent) for child in children})
        sampled = self.runner.run(out, rows, fanout)
        child_chunks = [self._fork(parent_id, child) for parent_id, children in fanout.items() for child in children]
        update = SchedulerOutput(out.chunks + child_chunks, out.preempted)
        finished = {r.request_id: r.finish_reason.value for r in self.scheduler.update(update, {k: s.token_id for k, s in sampled.items()})}
        finished.update(self._stop_token_finishes(sampled, finished))
        return sampled, finished
        # END SOLUTION
    # ANCHOR_END: step

    def _may_speculate(self, request: Request) -> bool:
        """Whether drafts may be verified for this request: any without structured output (its guide would
        have to follow every draft)."""
        return self._constraints is None or request.request_id not in self._constraints.guides

    def _unforked_children(self, parent_id: str) -> list[str]:
        """The completions of `parent_id` still to fork (one aborted on its own before its fork is left out)."""
        return [child for child in self._children.pop(parent_id) if child in self._params]

    # ANCHOR: fork_and_stop
    def _fork(self, parent_id: str, child_id: str) -> ScheduledChunk:
        """Completion `child_id` joins the batch on its parent's prompt blocks (before the parent's update).

        The child: a Request with the parent's prompt, limits and stop settings, its prompt all computed
        and as cached as the parent's (its events report the parent's cached prompt tokens); it shares the parent's blocks
        (no copy), runs via the scheduler's add_forked and counts in counters["forked_requests"].
        Returns the child's ScheduledChunk for this step's update: through it the update records the
        child's first token, and the child computes nothing this step."""
        # Nudge: the child starts where the parent's prompt ends, on the parent's blocks.
        # Hint 1: The parent's last prompt chunk produced logits that the child samples from in this
        #   same step, so the child needs nothing computed: its prompt is done the moment it
        #   exists. What it does need is the K/V of that prompt, and those are the parent's
        #   blocks: share them (the paged memory's fork), never copy. A chunk of zero tokens at
        #   the end of the prompt lets the scheduler's update record the child's first token
        #   exactly as it records anyone's.
        # Hint 2: Look the parent up in the scheduler's requests. Build the child Request from the
        #   parent's prompt_token_ids, max_tokens, eos_token_ids and ignore_eos; set its
        #   num_computed_tokens to the prompt's length; copy the parent's entry of
        #   self._prompt_cached (the cached prompt tokens its events report). Fork the memory, hand the child to
        #   the scheduler (add_forked), count it, and return ScheduledChunk(child, prompt length, 0).
        # Hint 3:
        #   parent = self.scheduler.requests[parent_id]
        #   child = Request(child_id, parent.prompt_token_ids, parent.max_tokens, parent.eos_token_ids, parent.ignore_eos)
        #   child.num_computed_tokens = len(prompt)
        #   self._prompt_cached[child_id] = self._prompt_cached[parent_id]
        #   self.memory.fork(parent_id, child_id); self.scheduler.add_forked(child); counters["forked_requests"] += 1
        #   return ScheduledChunk(child, child.num_computed_tokens, 0)
        # BEGIN SOLUTION 5.11: The engine step
        parent = self.scheduler.requests[parent_id]
        child = Request(child_id, parent.prompt_token_ids, parent.max_tokens, parent.eos_token_ids, parent.ignore_eos)
        child.num_computed_tokens = len(parent.prompt_token_ids)
        self._prompt_cached[child_id] = self._prompt_cached[parent_id]
        self.memory.fork(parent_id, child_id)
        self.scheduler.add_forked(child)
        self.counters["forked_requests"] += 1
        return ScheduledChunk(child, child.num_computed_tokens, 0)  # update() records its first token like any other
        # END SOLUTION

    def _stop_token_finishes(self, sampled: dict[str, SampledToken], finished: dict[str, str]) -> dict[str, str]:
        """Requests that sampled one of their stop_token_ids (even with ignore_eos): id -> "stop". One already
        in `finished` keeps its reason; each stopped here is ended in the scheduler (its blocks come back)."""
        # Nudge: the scheduler knows EOS; a request's own stop tokens are the engine's business.
        # Hint 1: The scheduler ended requests on EOS (unless ignore_eos) and on max_tokens.
        #   stop_token_ids are a sampling setting, checked after the update and regardless of
        #   ignore_eos. Ending a request here means taking it out of the scheduler (abort
        #   frees its blocks) while reporting "stop", not "abort".
        # Hint 2: For each sampled (id, token) whose id is not already finished, if the token is in
        #   that completion's params' stop_token_ids: abort it in the scheduler and record "stop".
        # Hint 3:
        #   for rid, s in sampled.items():
        #       if rid not in finished and s.token_id in self._params[rid].stop_token_ids:
        #           self.scheduler.abort(rid); stopped[rid] = "stop"
        # BEGIN SOLUTION 5.11: The engine step
        stopped = {}
        for rid, s in sampled.items():
            if rid not in finished and s.token_id in self._params[rid].stop_token_ids:
                self.scheduler.abort(rid)  # frees its blocks; the reason we report is "stop"
                stopped[rid] = "stop"
        return stopped
        # END SOLUTION
    # ANCHOR_END: fork_and_stop

    @staticmethod
    def _event(rid: str, s: SampledToken, finish_reason: str | None, cached_tokens: int) -> RequestEvent:
        return RequestEvent(rid, s.token_id, finish_reason, s.logprob, s.top_logprobs, cached_tokens)

    # ANCHOR: finish
    def finish(self, request_id: str) -> bool:
        """End one running completion early (a stop string matched): its blocks come back now, it
        counts as a finished request (not an aborted one), and its id is forgotten (self._forget).
        True if the scheduler was running it; False (nothing counted) otherwise."""
        # Nudge: the engine cannot see a stop string; it is told, and must end the completion as a finish.
        # Hint 1: Stop strings are text, and text is made after the step (the output processor's
        #   work), so the completion would run on, holding blocks, unless the engine is told.
        #   The scheduler's abort is the way out of its queues, but for the counters this is a
        #   normal end: finished_requests counts it.
        # Hint 2: Abort the id in the scheduler; if it returned a request, add one to
        #   counters["finished_requests"]. Forget the id either way; return whether it ended.
        # Hint 3:
        #   finished = self.scheduler.abort(request_id) is not None
        #   if finished: self.counters["finished_requests"] += 1
        #   self._forget(request_id); return finished
        # BEGIN SOLUTION 5.12: The request lifecycle
        finished = self.scheduler.abort(request_id) is not None
        if finished:
            self.counters["finished_requests"] += 1
        self._forget(request_id)
        return finished
        # END SOLUTION
    # ANCHOR_END: finish
