"""A deterministic stand-in for the model, and a driver that checks the scheduler every step."""

from __future__ import annotations

from dataclasses import dataclass, field

from miniyaie.scheduler import Request, Scheduler, SchedulerOutput

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
        self.used_tokens = used_tokens  # callable -> tokens of memory in use, if the memory tells
        self.trace = Trace()
        self.next_position: dict[str, int] = {}  # where each running request's next chunk must start
        self.all_requests: dict[str, Request] = {}

    def add(self, request: Request) -> None:
        self.scheduler.add_request(request)
        self.all_requests[request.request_id] = request

    def step(self) -> SchedulerOutput:
        s, config = self.scheduler, self.scheduler.config
        out = s.schedule()
        assert out.num_batched_tokens <= config.max_num_batched_tokens, "token budget exceeded"
        assert len(s.running) <= config.max_num_seqs, "max_num_seqs exceeded"
        assert not {id(r) for r in s.waiting} & {id(r) for r in s.running}, "a request both waiting and running"
        for r in out.preempted:
            self.next_position.pop(r.request_id, None)
            assert r in s.waiting and r.num_computed_tokens == 0
        ids = [c.request.request_id for c in out.chunks]
        assert len(ids) == len(set(ids)), "a request scheduled twice in one step"
        for chunk in out.chunks:
            rid = chunk.request.request_id
            assert chunk.num_tokens >= 1 and chunk.request in s.running
            if rid not in self.next_position:  # (re)admitted this step, possibly after a prefix hit
                self.trace.admissions.append(rid)
                if rid not in self.trace.first_admissions:
                    self.trace.first_admissions.append(rid)
                assert chunk.start < chunk.request.num_tokens, "the last token is always computed"
            else:
                assert chunk.start == self.next_position[rid], "tokens skipped or computed twice"
            assert chunk.start + chunk.num_tokens <= chunk.request.num_tokens
            self.next_position[rid] = chunk.start + chunk.num_tokens
        if self.used_tokens is not None:
            assert self.used_tokens() <= s.memory.capacity_tokens
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
