"""A deterministic stand-in for the model, and a driver that checks the scheduler every step."""

from __future__ import annotations

from dataclasses import dataclass, field

from miniyaie.scheduler import Request, RequestStatus, Scheduler, SchedulerOutput

VOCAB = 50
EOS = 0


def next_token(tokens: list[int]) -> int:
    """The fake model: the next token is a fixed function of the whole sequence."""
    h = 7
    for t in tokens:
        h = (h * 31 + t + 1) % 1_000_003
    return h % VOCAB


def reference_output(prompt: list[int], max_tokens: int, ignore_eos: bool = True) -> list[int]:
    """What the request produces when it runs alone, never preempted."""
    tokens, out = list(prompt), []
    while len(out) < max_tokens:
        token = next_token(tokens)
        tokens.append(token)
        out.append(token)
        if token == EOS and not ignore_eos:
            break
    return out


def model_step(out: SchedulerOutput) -> dict[str, int]:
    """Run the fake model on a step: a token for every chunk that reaches the end of its request."""
    return {c.request.request_id: next_token(c.request.all_token_ids) for c in out.chunks if c.samples_next_token}


@dataclass
class Trace:
    """What happened, step by step, as seen from outside the scheduler."""

    steps: list[SchedulerOutput] = field(default_factory=list)
    admissions: list[str] = field(default_factory=list)  # request ids, each time a request starts (again)
    first_admissions: list[str] = field(default_factory=list)


class Driver:
    """Steps a scheduler with the fake model, asserting the invariants after every step."""

    def __init__(self, scheduler: Scheduler, used_tokens=None):
        self.scheduler = scheduler
        # tokens of memory in use, if the memory tells (TokenCountingMemory does: one slot per token)
        if used_tokens is None and hasattr(scheduler.memory, "num_used_tokens"):
            used_tokens = lambda: scheduler.memory.num_used_tokens  # noqa: E731
        self.used_tokens = used_tokens
        self.trace = Trace()
        self.next_position: dict[str, int] = {}  # where each running request's next chunk must start
        self.all_requests: dict[str, Request] = {}

    def add(self, request: Request) -> None:
        self.scheduler.add_request(request)
        self.all_requests[request.request_id] = request

    def step(self) -> SchedulerOutput:
        s, config = self.scheduler, self.scheduler.config
        running_before = list(s.running)
        counts_before = s.num_preemptions, {r.request_id: r.num_preemptions for r in running_before}
        out = s.schedule()
        check_step(s, out, running_before)
        assert s.num_preemptions == counts_before[0] + len(out.preempted), (
            f"num_preemptions grew by {s.num_preemptions - counts_before[0]} in a step whose out.preempted lists "
            f"{len(out.preempted)}: each preempted request is listed in out.preempted and counted once"
        )
        for r in out.preempted:
            assert r.num_preemptions == counts_before[1][r.request_id] + 1, "a request counts its own preemptions"
        for r in out.preempted:
            self.next_position.pop(r.request_id, None)
        for chunk in out.chunks:
            rid = chunk.request.request_id
            if rid not in self.next_position:  # (re)admitted this step, possibly after a prefix hit
                self.trace.admissions.append(rid)
                if rid not in self.trace.first_admissions:
                    self.trace.first_admissions.append(rid)
            else:
                assert chunk.start == self.next_position[rid], "tokens skipped or computed twice"
            self.next_position[rid] = chunk.start + chunk.num_tokens
        if self.used_tokens is not None:
            held = sum(r.num_computed_tokens for r in s.running) + out.num_batched_tokens
            assert self.used_tokens() == held, (
                f"memory holds {self.used_tokens()} tokens, but the running requests' computed + scheduled "
                f"tokens are {held}: an allocation was skipped, or memory was not freed"
            )
            assert self.used_tokens() <= s.memory.capacity_tokens
        if hasattr(s.memory, "block_table"):  # a paged memory: every request's table covers exactly its tokens
            scheduled = {c.request.request_id: c.num_tokens for c in out.chunks}
            bs = s.memory.block_size
            for r in s.running:
                held = r.num_computed_tokens + scheduled.get(r.request_id, 0)
                assert len(s.memory.block_table(r.request_id)) == -(-held // bs), (
                    f"{r.request_id} holds {len(s.memory.block_table(r.request_id))} blocks for {held} tokens"
                )
            for r in s.waiting:
                assert s.memory.block_table(r.request_id) == [], f"waiting {r.request_id} still holds blocks"
        finished = s.update(out, model_step(out))
        for r in finished:
            self.next_position.pop(r.request_id, None)
        self.trace.steps.append(out)
        return out

    def run_to_completion(self, max_steps: int) -> None:
        for _ in range(max_steps):
            if not self.scheduler.has_unfinished():
                return
            self.step()
        raise AssertionError(f"requests still unfinished after {max_steps} steps (starvation?)")


def check_step(s: Scheduler, out: SchedulerOutput, running_before: list[Request]) -> None:
    """What every correct scheduler guarantees right after schedule(), seen from outside."""
    config = s.config
    assert out.num_batched_tokens <= config.max_num_batched_tokens, "token budget exceeded"
    assert len(s.running) <= config.max_num_seqs, "max_num_seqs exceeded"
    assert not {id(r) for r in s.waiting} & {id(r) for r in s.running}, "a request both waiting and running"
    for r in s.running:
        assert r.status is RequestStatus.RUNNING, f"{r.request_id} runs with status {r.status}"
    for r in s.waiting:
        assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED), f"{r.request_id} waits as {r.status}"
        assert r.num_computed_tokens == 0, (
            f"{r.request_id} waits with num_computed_tokens={r.num_computed_tokens}: a waiting request has "
            "nothing in the cache (reset it when admission fails or the request is preempted)"
        )
    preempted = out.preempted
    assert len({id(r) for r in preempted}) == len(preempted), "a request preempted twice in one step"
    for r in preempted:
        assert r.status is RequestStatus.PREEMPTED, f"a preempted request has status {r.status}"
        assert r in running_before, "only a request that was running can be preempted"
    head = list(s.waiting)[: len(preempted)]
    assert {id(r) for r in head} == {id(r) for r in preempted}, "preempted requests wait at the front of the queue"
    assert head == [r for r in running_before if r in preempted], "preempted requests keep their order"
    if preempted:
        admitted = [c.request.request_id for c in out.chunks if c.request not in running_before]
        assert not admitted, f"{admitted} admitted in a step that preempted: memory is tight, the running requests drain first"
    newest = running_before[len(running_before) - len(preempted) :]
    assert {id(r) for r in preempted} == {id(r) for r in newest}, "the newest running requests are preempted first"
    ids = [c.request.request_id for c in out.chunks]
    assert len(ids) == len(set(ids)), "a request scheduled twice in one step"
    for chunk in out.chunks:
        r = chunk.request
        assert chunk.num_tokens >= 1, "an empty chunk was scheduled"
        assert r in s.running, "a scheduled request is not running"
        assert chunk.start == r.num_computed_tokens, (
            f"{r.request_id}: the chunk starts at {chunk.start} but num_computed_tokens is {r.num_computed_tokens}"
        )
        assert chunk.start < r.num_tokens, "the last token is always computed"
        assert chunk.start + chunk.num_tokens <= r.num_tokens, "a chunk past the known tokens"
