"""The draft model's pool and its prefill budget: the machinery around chapter 9's DraftModelProposer.

A draft model computes, for each request, every token the target has emitted since it last drafted. For
a request it has not seen (a 6,000-token prompt that just finished its prefill, a request back from
preemption) that is the whole prompt, and one pass over it would stall every other request's step for as
long. So the draft catches up a chunk per call, at most `max_prefill_tokens` for all such requests (the
engine's long-prefill bound), and drafts for a request only once it has caught up. The completions of
one prompt (n > 1) share its blocks: the prompt is computed once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

import torch

from miniyaie.paged import PagedMemory, blocks_needed
from miniyaie.scheduler import Request, ScheduledChunk, SchedulerOutput


@dataclass
class DraftCopy:
    """The draft model's view of one request: its tokens (`request`, a Request of the draft's own) and how many
    of them the target has confirmed (`confirmed`: the prompt and the target's emitted tokens)."""

    request: Request
    confirmed: int = 0
    drafted: list[int] = field(default_factory=list)  # the drafts of the last call, after the confirmed tokens
    prompt_key: int = 0  # a hash of the prompt: the copies of one prompt's completions find each other by it

    @property
    def backlog(self) -> int:
        """Tokens to compute before drafting: from the computed ones to the last (its logits start the drafts)."""
        return self.request.num_tokens - self.request.num_computed_tokens


class DraftPrefill:
    """Copies of the requests, the draft's own pool and runner, and which copies are ready to draft this call.

    Subclasses give `_follow(request) -> DraftCopy` (bring a copy in line with its request).
    """

    def __init__(self, memory: PagedMemory, runner, max_prefill_tokens: int):
        if max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be at least 1, got {max_prefill_tokens}")
        self.memory, self.runner, self.max_prefill_tokens = memory, runner, max_prefill_tokens
        self.copies: dict[str, DraftCopy] = {}
        self.forward_passes = 0  # the draft model's own steps (each drafts one token for every request in it)
        self.computed_tokens = 0  # tokens the draft model computed, drafts and catching up together

    def _ready(self, wanted: list[tuple[Request, int]]) -> list[tuple[DraftCopy, int]]:
        """Follow every wanted request; return (copy, k) for those caught up, with room made for drafting k.

        Backlogs share this call's budget, the shortest first; a copy over it computes a chunk instead.
        """
        ready, behind, drafting = [], [], {r.request_id for r, _ in wanted}
        for request, _ in wanted:
            if request.request_id not in self.copies:
                prompt = list(request.prompt_token_ids)
                self.copies[request.request_id] = DraftCopy(Request(request.request_id, prompt, request.max_tokens),
                                                            prompt_key=hash(tuple(prompt)))
        followed = [(self._follow(request), k) for request, k in wanted]
        self._share_prompts([copy for copy, _ in followed])
        budget = self.max_prefill_tokens
        for copy, k in sorted(followed, key=lambda pair: pair[0].backlog):
            if copy.backlog > max(budget, k + 1):  # not caught up: a chunk of its backlog now, drafts later
                behind.append(copy)
            elif self._make_room(copy, copy.backlog + k - 1, drafting):
                ready.append((copy, k))
                budget -= copy.backlog
        self._catch_up(behind, max(budget, 0), drafting)
        return ready

    def forget(self, request_id: str) -> None:
        """Give back the draft's blocks of a request that ended."""
        copy = self.copies.pop(request_id, None)
        if copy is not None:
            self.memory.free(copy.request)

    def _make_room(self, copy: DraftCopy, num_tokens: int, keep: set[str]) -> bool:
        """Allocate the slots of the copy's next num_tokens tokens, first forgetting the copies of requests not
        in `keep` (preempted ones) if the pool is short; False if they still do not fit."""
        if not self.memory.can_allocate(copy.request, num_tokens):
            for rid in [rid for rid in self.copies if rid not in keep]:
                self.forget(rid)
            if not self.memory.can_allocate(copy.request, num_tokens):
                return False
        self.memory.allocate(copy.request, num_tokens)
        return True

    def _share_prompts(self, copies: list[DraftCopy]) -> None:
        """A copy still computing its prompt takes the blocks of a copy of the same prompt that is further on."""
        done = lambda c: min(c.request.num_computed_tokens, len(c.request.prompt_token_ids))  # noqa: E731
        groups: dict[int, list[DraftCopy]] = {}
        for copy in copies:
            groups.setdefault(copy.prompt_key, []).append(copy)
        for group in groups.values():
            leader = max(group, key=done)
            for copy in group:
                behind = copy.request.num_computed_tokens < done(leader)  # then all it computed is prompt
                if behind and copy.request.prompt_token_ids == leader.request.prompt_token_ids:
                    self.memory.free(copy.request)
                    blocks = self.memory.block_table(leader.request.request_id)
                    self.memory.share_blocks(copy.request.request_id, blocks[: blocks_needed(done(leader), self.memory.block_size)])
                    copy.request.num_computed_tokens = done(leader)

    def _catch_up(self, behind: list[DraftCopy], budget: int, keep: set[str]) -> None:
        """Compute up to `budget` tokens of the copies' backlogs in one pass, never a copy's last token (its
        logits start the drafts); of the copies of one prompt only the first, the others share its blocks."""
        chunks, prompts = [], set()
        for copy in behind:
            size = min(budget, copy.backlog - 1)
            if size >= 1 and copy.prompt_key not in prompts and self._make_room(copy, size, keep):
                prompts.add(copy.prompt_key)
                chunks.append(ScheduledChunk(copy.request, copy.request.num_computed_tokens, size))
                budget -= size
        if chunks:
            self._forward(chunks, [])
            for chunk in chunks:
                chunk.request.num_computed_tokens = chunk.start + chunk.num_tokens

    def _next_tokens(self, chunks: list[ScheduledChunk]) -> list[int]:
        """The draft model's greedy token after each chunk (one forward pass for all of them)."""
        rows = [end - 1 for end in accumulate(chunk.num_tokens for chunk in chunks)]  # each chunk's last token
        return self._forward(chunks, rows).argmax(dim=-1).tolist()

    @torch.inference_mode()
    def _forward(self, chunks: list[ScheduledChunk], rows: list[int]) -> torch.Tensor | None:
        """One forward pass of the draft model over the chunks; the logits of `rows`."""
        input_ids, positions, meta = self.runner.prepare(SchedulerOutput(chunks, []))
        self.forward_passes += 1
        self.computed_tokens += len(input_ids)
        return self.runner.forward(input_ids, positions, meta, rows)
