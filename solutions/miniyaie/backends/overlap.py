"""Overlap scheduling: the host records step N and schedules step N+1 while the model runs step N.

A plain step is strictly serial: schedule, pack, forward, sample, then the
host's bookkeeping (append tokens, stop checks, events, detokenizing in the
caller) while the device waits. On a GPU that bookkeeping is most of a small
step. Here the model's part runs on a device thread, and `step()` returns as
soon as the step is launched, with the events of the step before it:

    host:    schedule N | launch N | record N-1, update N (placeholders) | caller's work | schedule N+1 | launch N+1 ...
    device:       ... forward N-1 | pack N | forward + sample N ...................................| pack N+1 ...

Step N+1 is scheduled before step N's tokens are known, so the scheduler
records each of them as PENDING (the count of tokens is known, their values
are not); the device thread puts the real value in before it packs N+1. A
request that step N ends (end-of-sequence, a stop token) has already been
scheduled for N+1: that extra token is dropped and its blocks come back,
one step late. Tokens, finish reasons and block accounting equal the plain
loop's (the tests compare the two).

Only steps whose sampling needs no token values on the host overlap:
requests with penalties (they read the output), a structured-output guide
(its mask follows every token) and n > 1 completions still to fork make the
engine land the step in flight and run the plain step instead (EngineConfig
refuses overlap with speculative decoding, whose drafts read the tokens, and
with tensor parallelism). The memory (block tables, copies) is touched by one
thread at a time: the host waits until the device thread has packed a step.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from miniyaie.scheduler import FinishReason, Request, SchedulerOutput

PENDING = -1  # an output token sampled by a step in flight: its value is not on the host yet


def _use_device(device: torch.device) -> None:
    """The model's thread launches on the model's GPU (a thread starts on GPU 0; Triton launches on the current one)."""
    if device.type == "cuda":
        torch.cuda.set_device(device)


@dataclasses.dataclass
class StepInFlight:
    """A launched step: what the host must know to record it once its tokens are back."""

    out: SchedulerOutput
    result: Future  # -> dict[request id, SampledToken]
    started: float
    used_blocks: int
    cached: int
    requests: dict[str, Request]  # the requests that sample, by id
    params: dict[str, object]  # their SamplingParams: an id aborted (and perhaps reused) since has others
    pending_at: dict[str, int] = dataclasses.field(default_factory=dict)  # where each PENDING token sits
    finished: dict[str, str] = dataclasses.field(default_factory=dict)  # ended by the update (length)


class OverlapScheduling:
    """Mixed into LLMEngine: needs self.scheduler, self.runner, self.memory, self.counters and the engine's
    per-request maps. Nothing here imports the engine (chapter 5), so the events, rows and tokens it handles
    are the engine's RequestEvent, SamplingRow and SampledToken, unnamed. `self._in_flight` is the launched
    step not recorded yet (or None)."""

    _in_flight: StepInFlight | None = None
    _device_thread: ThreadPoolExecutor | None = None
    _last_sampled: dict[str, int] = {}  # the device thread's tokens of the step it ran last (it sets its own)

    def wait_for_model(self) -> None:
        """Block until the step in flight, if any, has run (it is recorded by the next step()): for timing."""
        if self._in_flight is not None:
            self._in_flight.result.exception()

    def _can_overlap(self) -> bool:
        """No live request needs its tokens' values on the host before its next step is packed."""
        if self._children or (self._constraints is not None and self._constraints.guides):
            return False
        return not any(p.repetition_penalty != 1 or p.presence_penalty or p.frequency_penalty
                       for p in self._params.values())

    # ANCHOR: overlap_step
    def _overlap_step(self) -> list:
        """Launch the next step and record the one before it (its RequestEvents); a step that cannot overlap runs plain."""
        if not self._can_overlap():
            events = self._land() if self._in_flight is not None else []
            return events + self._plain_step()
        started = time.perf_counter()
        was_running = {r.request_id for r in self.scheduler.running}
        out = self.scheduler.schedule()
        launched = None
        if not out.is_empty:
            used_blocks = self.memory.num_used_blocks
            cached = self._note_admissions(out, was_running)
            launched = self._launch(out, started, used_blocks, cached)
        events = self._land() if self._in_flight is not None else []
        if launched is not None:
            self._record_pending(launched)
            self._in_flight = launched
        return events
    # ANCHOR_END: overlap_step

    def _launch(self, out: SchedulerOutput, started: float, used_blocks: int, cached: int) -> StepInFlight:
        """Hand the step to the device thread; return once it has packed the step (the memory is ours again)."""
        if self._device_thread is None:
            self._device_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="miniyaie-device",
                                                     initializer=_use_device, initargs=(self.runner.device,))
        sampling = {c.request.request_id: c.request for c in out.chunks if c.samples_next_token}
        rows = {rid: self._snapshot_row(rid, request) for rid, request in sampling.items()}
        packed, failed = threading.Event(), []
        result = self._device_thread.submit(self._device_step, out, rows, packed, failed)
        packed.wait()
        if failed:  # nothing was launched; a failed step before it (its tokens missing here) is the cause
            before = self._in_flight
            if before is not None and before.result.done() and before.result.exception() is not None:
                self._land()
            raise failed[0]
        self.counters["overlapped_steps"] += 1
        return StepInFlight(out, result, started, used_blocks, cached, sampling,
                            {rid: self._params[rid] for rid in sampling})

    def _snapshot_row(self, request_id: str, request: Request):
        """The request's SamplingRow. The host appends to the output while the model samples, and the sampler
        reads only its length here (penalties never overlap): a request still short of min_tokens gets a copy,
        the length of the others cannot change what the sampler bans, so they keep the list (no copy a step)."""
        row = self._row(request_id, request)
        if len(request.output_token_ids) >= row.params.min_tokens:
            return row
        return dataclasses.replace(row, output_token_ids=tuple(request.output_token_ids))

    def _device_step(self, out: SchedulerOutput, rows: dict, packed: threading.Event, failed: list[BaseException]) -> dict:
        """On the device thread: fill in the PENDING tokens, pack (the runner's prepare), tell the host, run, sample.

        ModelRunner.run, split where the host may go on: `rows` are the SamplingRows by request id; returns
        the SampledTokens by request id."""
        try:
            for chunk in out.chunks:  # a PENDING token is always the last of its chunk: the next input
                tokens = chunk.request.output_token_ids
                if tokens and tokens[-1] == PENDING and chunk.start + chunk.num_tokens == chunk.request.num_tokens:
                    tokens[-1] = self._last_sampled[chunk.request.request_id]
            self._last_sampled = {}  # a step that fails leaves none behind for the next to take
            input_ids, positions, meta = self.runner.prepare(out)
            logit_rows, picked = self.runner.sampling_rows(out, {})
        except BaseException as exc:
            failed.append(exc)
            raise
        finally:
            packed.set()
        logits = self.runner.forward(input_ids, positions, meta, logit_rows)
        sampled = dict(zip(picked, self.runner.sampler(logits, [rows[rid] for rid in picked]))) if picked else {}
        self._last_sampled = {rid: s.token_id for rid, s in sampled.items()}
        return sampled

    def _record_pending(self, step: StepInFlight) -> None:
        """The scheduler's update of a launched step, each sampled token as PENDING (max_tokens ends here)."""
        before = {rid: len(request.output_token_ids) for rid, request in step.requests.items()}
        done = self.scheduler.update(step.out, dict.fromkeys(step.requests, PENDING))
        step.pending_at = {rid: before[rid] for rid, request in step.requests.items()
                           if len(request.output_token_ids) > before[rid]}  # a chunk of a finished request is skipped
        step.finished = {r.request_id: r.finish_reason.value for r in done}

    def _land(self) -> list:
        """Wait for the step in flight and record it: its tokens, stops, counters and events."""
        step, self._in_flight = self._in_flight, None
        try:
            sampled_all = step.result.result()
        except BaseException:  # its PENDING tokens will never be known: end its requests, their blocks come back
            for rid in step.requests:
                if self._params.get(rid) is step.params[rid]:
                    self.scheduler.abort(rid)
                    self._forget(rid)
            raise
        sampled = {rid: s for rid, s in sampled_all.items()
                   if rid in step.pending_at and self._params.get(rid) is step.params[rid]}  # not aborted since
        finished = dict(step.finished)
        for rid, s in sampled.items():
            request = step.requests[rid]
            request.output_token_ids[step.pending_at[rid]] = s.token_id
            eos = s.token_id in request.eos_token_ids and not request.ignore_eos
            if rid in finished:
                if eos:  # the plain update's order: an end-of-sequence token that is also the last allowed one
                    finished[rid], request.finish_reason = "stop", FinishReason.STOP
            elif eos or s.token_id in self._params[rid].stop_token_ids:
                self.scheduler.abort(rid)  # its next step was launched already: that token is dropped
                finished[rid], request.finish_reason = "stop", FinishReason.STOP
        finished = {rid: reason for rid, reason in finished.items() if rid in sampled}
        self._count_step(step.out, step.started, step.used_blocks, step.cached, sampled, finished)
        events = [self._event(rid, s, finished.get(rid), self._prompt_cached.get(rid, 0)) for rid, s in sampled.items()]
        for rid in finished:
            self._forget(rid)
        return events
