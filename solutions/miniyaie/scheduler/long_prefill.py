"""A long prompt shares the step: unbounded, the oldest prefill takes the whole budget until its prompt
is done and a short request behind it waits for all of it (vLLM: --long-prefill-token-threshold)."""

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
    request's end, and lift lets the scheduler admit the long prompts held
    back with what is still left: a long prompt alone still fills the step. `num_held`
    counts the long requests that ended a step with fewer tokens than they
    wanted (a counter: the bound is on the hot path); a request still queued
    when the budget ran out was never asked about (tokens_for is asked with a
    budget of at least 1) and is not counted. threshold 0: no bound.

    Example (threshold 256, max_long 1, budget 512): an 8,000-token prompt
    alone gets 256 from tokens_for and 256 more from top_up. With a 4-token
    request beside it, the prompt gets 256 + 252 and the short one 4. A
    second long prompt asked about in the same step gets 0: it waits.
    """

    def __init__(self, threshold: int, max_long: int):  # checked by SchedulerConfig
        self.threshold, self.max_long = threshold, max_long
        self.num_held = 0
        self.start_step()

    def start_step(self) -> None:
        """A new step: no long request has been asked about yet, and the bound holds."""
        self.lifted = False  # True once the budget left over may go to the long prompts held back
        self.num_long = 0  # long requests granted tokens this step
        self.asked: dict[str, int] = {}  # request id -> the tokens it wanted, for each long request asked about

    def tokens_for(self, request: Request, budget: int) -> int:
        """The tokens `request` may take now (budget >= 1): at most what it lacks, and at most `budget`.

        A request that is not long gets all of that. A long one gets at most
        `threshold`, and in one step only the first `max_long` long requests
        asked about get any: the others get 0. What top_up and lift need to
        know about the long requests asked about this step is kept in
        self.asked and self.num_long (start_step resets them).
        """
        wanted = min(request.num_tokens - request.num_computed_tokens, budget)
        if not self.threshold or self.lifted:
            return wanted  # no bound (Tasks 1.2 to 1.6 are graded without it), or lifted for the leftover
        # Nudge: the bound applies to long requests only, and to at most max_long of them a step.
        # Hint 1: A short request and a decode get all they want: the bound is there to protect
        #   them. A long request (more than threshold tokens still to compute) gets at most
        #   threshold tokens, and only max_long long requests may take any: so the others
        #   always find at least budget - max_long * threshold tokens in every step. Keep a note
        #   of what each long request wanted: top_up counts those that end up with less.
        # Hint 2: If what the request lacks is not more than threshold, return wanted. Else record
        #   self.asked[request_id] = wanted; return 0 when num_long has reached max_long,
        #   otherwise add one to num_long and return the smaller of wanted and threshold.
        # Hint 3:
        #   if r.num_tokens - r.num_computed_tokens <= threshold: return wanted
        #   asked[r.request_id] = wanted
        #   if num_long >= max_long: return 0
        #   num_long += 1
        #   return min(wanted, threshold)
        # BEGIN SOLUTION 1.7: Long prefills share the step
        if request.num_tokens - request.num_computed_tokens <= self.threshold:
            return wanted
        self.asked[request.request_id] = wanted
        if self.num_long >= self.max_long:
            return 0
        self.num_long += 1
        return min(wanted, self.threshold)
        # END SOLUTION

    def top_up(self, out: SchedulerOutput, budget: int, memory: KVMemory) -> None:
        """Give `budget` (what is left of the step's) to the chunks that stop short of their request's end.

        Afterwards the oldest such chunks (out.chunks order) have had first
        call on the budget, and each one has either grown by all it may
        take (what its request still lacks, or the budget left when that is
        less) or, when memory.can_allocate says the memory cannot hold that
        much more, stayed as it was: never grown by a part, and nobody is
        preempted for it. A grown chunk is allocated and keeps its place in
        out.chunks. Example (asserted): budget 16, threshold 4, two long
        prefills and a 3-token prompt get 4, 4 and 3; the 5 left go to the
        older long prefill: 9, 4, 3. num_held has then grown by the requests
        in self.asked that end the step with fewer tokens than they wanted
        (a request with no chunk got 0; a chunk never grows past what its
        request wanted).
        """
        if not self.threshold or self.lifted:
            return
        # Nudge: nobody else wanted the rest of the budget, so the prefills that were cut may have it.
        # Hint 1: The bound exists for the others' sake; once everyone has been served, tokens
        #   left over are wasted unless the cut prefills take them. Only a chunk that stops short
        #   of its request's end can grow, and growing needs memory: never preempt for it. Then
        #   count who was still held back: the counter shows the bound at work.
        # Hint 2: Walk out.chunks by index. For each chunk, extra = the smaller of what its
        #   request lacks after the chunk and the budget. If extra > 0 and
        #   memory.can_allocate(request, chunk.num_tokens + extra), allocate that, replace the
        #   chunk with ScheduledChunk(request, chunk.start, chunk.num_tokens + extra) and spend
        #   extra. Last, add to num_held the ids in asked that did not end up with all they wanted
        #   (a chunk grows at most back to wanted; a request with no chunk got nothing).
        # Hint 3:
        #   for i, c in enumerate(out.chunks):
        #       extra = min(c.request.num_tokens - c.start - c.num_tokens, budget)
        #       if extra > 0 and memory.can_allocate(c.request, c.num_tokens + extra):
        #           memory.allocate(c.request, c.num_tokens + extra)
        #           out.chunks[i] = ScheduledChunk(c.request, c.start, c.num_tokens + extra); budget -= extra
        #   got = {c.request.request_id: c.num_tokens for c in out.chunks}
        #   num_held += len(asked) - sum(got.get(rid) == wanted for rid, wanted in asked.items())
        # BEGIN SOLUTION 1.7: Long prefills share the step
        for index, chunk in enumerate(out.chunks):
            request = chunk.request
            extra = min(request.num_tokens - chunk.start - chunk.num_tokens, budget)
            if extra > 0 and memory.can_allocate(request, chunk.num_tokens + extra):
                memory.allocate(request, chunk.num_tokens + extra)
                out.chunks[index] = ScheduledChunk(request, chunk.start, chunk.num_tokens + extra)
                budget -= extra
        granted = {chunk.request.request_id: chunk.num_tokens for chunk in out.chunks}
        self.num_held += len(self.asked) - sum(granted.get(rid) == wanted for rid, wanted in self.asked.items())
        # END SOLUTION

    def lift(self, out: SchedulerOutput, budget: int) -> bool:
        """After top_up: True, lifting the bound for the rest of the step, when `budget` is left and a long
        request asked about got no tokens (held back): the scheduler then admits again, so no budget is
        wasted while a long prompt waits. False when the bound is off or was lifted already."""
        if not self.threshold or self.lifted or budget == 0:
            return False
        # Nudge: a long prompt held back while budget goes unused is budget wasted.
        # Hint 1: The bound orders who goes first; it must not leave tokens unused. Once the cut
        #   prefills took what they could, budget still left means nobody else wanted it: the
        #   long prompts held back may have it. Lifted, tokens_for grants what is asked.
        # Hint 2: A long request asked about (in self.asked) that has no chunk in out was held
        #   back. If there is one, set self.lifted and return True; otherwise return False.
        # Hint 3:
        #   scheduled = {c.request.request_id for c in out.chunks}
        #   lifted = any(rid not in scheduled for rid in asked); return lifted
        # BEGIN SOLUTION 1.7: Long prefills share the step
        scheduled = {chunk.request.request_id for chunk in out.chunks}
        self.lifted = any(rid not in scheduled for rid in self.asked)
        return self.lifted
        # END SOLUTION
# ANCHOR_END: long_prefill_bound
