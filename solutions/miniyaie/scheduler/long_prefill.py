"""A long prompt shares the step: it may not take the whole budget while other requests want tokens.

Without a bound, the oldest running prefill takes the whole step budget until
its prompt is done, so a 4-token request that arrives behind an 8,000-token
prompt waits for all of it. vLLM bounds this with
`--long-prefill-token-threshold` and `--max-long-partial-prefills`; SGLang
chunks prefills the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from miniyaie.scheduler.request import Request
from miniyaie.scheduler.step import ScheduledChunk, SchedulerOutput

if TYPE_CHECKING:
    from miniyaie.scheduler.memory import KVMemory


# ANCHOR: long_prefill_bound
class LongPrefillBound:
    """What a long prefill may take of a step while other requests want tokens.

    A request is *long* when it has more than `threshold` tokens still to
    compute (num_tokens - num_computed_tokens, read when it is asked about).
    In a step (start_step begins one), tokens_for gives a long request at
    most `threshold` tokens, and tokens to at most `max_long` long requests;
    everyone else gets what it asks for. At the end of the step, top_up
    gives the budget nobody took back to the chunks that stop short of their
    request's end, so a long prompt alone still fills the step. `num_held`
    counts the long requests that ended a step with fewer tokens than they
    wanted (a counter: the bound is on the hot path). threshold 0: no bound.

    Example (threshold 256, max_long 1, budget 512): an 8,000-token prompt
    alone gets 256 from tokens_for and 256 more from top_up. With a 4-token
    request beside it, the prompt gets 256 + 252 and the short one 4. A
    second long prompt asked about in the same step gets 0: it waits.
    """

    def __init__(self, threshold: int, max_long: int):
        if threshold < 0 or max_long < 1:
            raise ValueError(f"threshold must be >= 0 and max_long >= 1, got {threshold} and {max_long}")
        self.threshold, self.max_long = threshold, max_long
        self.num_held = 0
        self.start_step()

    def start_step(self) -> None:
        """A new step: no long request has had tokens yet, and none was cut."""
        self.num_long = 0  # long requests granted tokens this step
        self.cut: dict[str, int] = {}  # request id -> the tokens it wanted, for each request granted fewer

    def tokens_for(self, request: Request, budget: int) -> int:
        """The tokens `request` may take now (budget >= 1).

        wanted = what it lacks (num_tokens - num_computed_tokens), at most
        `budget`. A request that is not long gets wanted. A long one gets at
        most `threshold`, or 0 when `max_long` long requests already got
        tokens this step; num_long counts those granted tokens. A request
        granted fewer than wanted is recorded: self.cut[request_id] = wanted.
        """
        wanted = min(request.num_tokens - request.num_computed_tokens, budget)
        if not self.threshold:
            return wanted  # no bound (Tasks 1.2 to 1.7 are graded without it)
        # Nudge: the bound applies to long requests only, and to at most max_long of them a step.
        # Hint 1: A short request and a decode get all they want: the bound is there to protect
        #   them. A long request (more than threshold tokens still to compute) gets at most
        #   threshold tokens, and only max_long long requests may take any: so the others
        #   always find at least budget - max_long * threshold tokens in every step. Keep a note
        #   of every request that got less than it wanted: top_up counts them at the end.
        # Hint 2: If what the request lacks is not more than threshold, return wanted. Else the
        #   grant is 0 when num_long has reached max_long, otherwise the smaller of wanted and
        #   threshold (and num_long grows by one). When the grant is below wanted, record
        #   self.cut[request_id] = wanted. Return the grant.
        # Hint 3:
        #   if r.num_tokens - r.num_computed_tokens <= threshold: return wanted
        #   granted = 0 if num_long >= max_long else min(wanted, threshold)
        #   if granted: num_long += 1
        #   if granted < wanted: cut[r.request_id] = wanted
        #   return granted
        # BEGIN SOLUTION 1.8: Long prefills share the step
        if request.num_tokens - request.num_computed_tokens <= self.threshold:
            return wanted
        granted = 0 if self.num_long >= self.max_long else min(wanted, self.threshold)
        if granted:
            self.num_long += 1
        if granted < wanted:
            self.cut[request.request_id] = wanted
        return granted
        # END SOLUTION

    def top_up(self, out: SchedulerOutput, budget: int, memory: KVMemory) -> None:
        """Give `budget` (what is left of the step's) to the chunks that stop short of their request's end.

        Oldest chunk first (out.chunks order); each grows by at most what its
        request still lacks after it, and only as far as the memory can grow
        it without preempting anyone (memory.can_allocate). A grown chunk is
        allocated and replaces the old one at the same place in out.chunks.
        Then num_held grows by the requests in self.cut that end the step
        with fewer tokens than they wanted (a request with no chunk has 0).
        """
        if not self.threshold:
            return
        # Nudge: nobody else wanted the rest of the budget, so the prefills that were cut may have it.
        # Hint 1: The bound exists for the others' sake; once everyone has been served, tokens
        #   left over are wasted unless the cut prefills take them. Only a chunk that stops short
        #   of its request's end can grow, and growing needs memory: never preempt for it. Then
        #   count who was still held back: the counter shows the bound at work.
        # Hint 2: Walk out.chunks by index while budget is left. For each chunk, extra = the
        #   smaller of what its request lacks after the chunk and the budget. If extra > 0 and
        #   memory.can_allocate(request, chunk.num_tokens + extra), allocate that, replace the
        #   chunk with ScheduledChunk(request, chunk.start, chunk.num_tokens + extra) and spend
        #   extra. Last, add to num_held the ids in cut whose final chunk (or 0) is below wanted.
        # Hint 3:
        #   for i, c in enumerate(out.chunks):
        #       if budget == 0: break
        #       extra = min(c.request.num_tokens - c.start - c.num_tokens, budget)
        #       if extra > 0 and memory.can_allocate(c.request, c.num_tokens + extra):
        #           memory.allocate(c.request, c.num_tokens + extra)
        #           out.chunks[i] = ScheduledChunk(c.request, c.start, c.num_tokens + extra); budget -= extra
        #   got = {c.request.request_id: c.num_tokens for c in out.chunks}
        #   num_held += sum(got.get(rid, 0) < wanted for rid, wanted in cut.items())
        # BEGIN SOLUTION 1.8: Long prefills share the step
        for index, chunk in enumerate(out.chunks):
            if budget == 0:
                break
            request = chunk.request
            extra = min(request.num_tokens - chunk.start - chunk.num_tokens, budget)
            if extra > 0 and memory.can_allocate(request, chunk.num_tokens + extra):
                memory.allocate(request, chunk.num_tokens + extra)
                out.chunks[index] = ScheduledChunk(request, chunk.start, chunk.num_tokens + extra)
                budget -= extra
        granted = {chunk.request.request_id: chunk.num_tokens for chunk in out.chunks}
        self.num_held += sum(granted.get(rid, 0) < wanted for rid, wanted in self.cut.items())
        # END SOLUTION
# ANCHOR_END: long_prefill_bound
