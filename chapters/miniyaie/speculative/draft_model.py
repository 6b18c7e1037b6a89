"""Drafts from a smaller model: the target's own machinery, run on a second model with its own cache (Task 9.4).

A draft model that shares the target's tokenizer guesses the next k tokens one at a time, as a normal
decode would, only cheaper. It keeps a paged KV cache of its own, so that each step it computes only
what is new for it: the tokens the target emitted since it last drafted. Its drafts are its greedy
choices, a point mass on each, so the engine's verification stays one rule for every proposer (the
target's own token at each position; for a point mass that is exactly the rejection-sampling rule of
Task 9.2). The same model drafting for itself must have every draft accepted: a strong check that its
cache follows the request exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from pathlib import Path

import torch

from miniyaie.engine.errors import EngineError
from miniyaie.engine.loading import load_model
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.model import CausalLM, LoadedModel
from miniyaie.paged import PagedMemory, make_pool
from miniyaie.scheduler import Request, ScheduledChunk, SchedulerOutput


@dataclass
class DraftCopy:
    """The draft model's view of one request: its tokens (`request`, a Request of the draft's own) and how many
    of them the target has confirmed (`confirmed`: the prompt and the target's emitted tokens)."""

    request: Request
    confirmed: int = 0
    drafted: list[int] = field(default_factory=list)  # the drafts of the last call, after the confirmed tokens


class DraftModelError(EngineError, ValueError):
    """No draft model, or one whose tokens would mean other words than the target's: refused at start."""


def load_draft_model(source: str | Path | LoadedModel | None, target: LoadedModel, config,
                     device: str | None, dtype: torch.dtype | None):
    """Speculative decoding's draft model (chapter 9), on the target's device; DraftModelError when there is
    none or when its tokenizer is not the target's (its token ids would mean other words)."""
    if source is None:
        raise DraftModelError("speculative decoding with a draft model needs one: give --draft-model PATH (draft_model=...)")
    draft = load_model(source, config, device or str(target.model.lm_head.weight.device), dtype)
    if draft.tokenizer.get_vocab() != target.tokenizer.get_vocab():
        raise DraftModelError(f"the draft model {str(source)!r} has another tokenizer than the target's: "
                         "its drafts would be other tokens")
    return draft.model


class DraftModelProposer:
    """Proposes up to k drafts per request with `model`, batched over the requests of a step.

    num_blocks, block_size: the draft's own KV pool. A request that does not fit gets no drafts this step
    (the step still runs); finished requests' blocks come back through `forget`.
    """

    def __init__(self, model: CausalLM, num_blocks: int, block_size: int):
        weight = model.lm_head.weight
        self.memory = PagedMemory(num_blocks, block_size)
        pool = make_pool(model.config, num_blocks, block_size, weight.dtype, weight.device)
        self.runner = ModelRunner(model, pool, self.memory)
        self.copies: dict[str, DraftCopy] = {}
        self.forward_passes = 0  # the draft model's own steps (each drafts one token for every request in it)

    # ANCHOR: draft
    def draft(self, wanted: list[tuple[Request, int]]) -> dict[str, list[int]]:
        """Request id -> its drafts, for each (request, k) of `wanted` that fits in the draft's pool.

        Each list holds exactly k tokens: the draft model's greedy continuation of the request's
        tokens, one token at a time as plain decoding would choose them. Requests that do not fit get
        no entry (the step runs without their drafts). Cost: at most max(k) forward passes of the
        draft model for the whole batch, and no token of a request is computed twice in one call.
        Afterwards each copy's `drafted` holds its drafts and its memory holds the K/V of every token
        it computed (the request's tokens and every draft but the last).
        """
        ready, drafting = [], {r.request_id for r, _ in wanted}
        for request, k in wanted:
            copy = self._follow(request)
            if not self._make_room(copy, k):  # room held for requests not drafting now (preempted) goes first
                for rid in [rid for rid in self.copies if rid not in drafting]:
                    self.forget(rid)
            if self._make_room(copy, k):
                ready.append((copy, k))
        # Idea: k drafts may cost k passes for the whole batch: what must a copy's first pass compute, and each later one?
        # Stuck? `miniyaie hint 9.4` prints hints, one level at a time.
        # TODO(Task 9.4): The draft model's cache. Replace this line with your code.
        raise NotImplementedError("Chapter 9, Task 4: The draft model's cache — see book/src/ch09_speculative.md")
    # ANCHOR_END: draft

    def forget(self, request_id: str) -> None:
        """Give back the draft's blocks of a request that ended."""
        copy = self.copies.pop(request_id, None)
        if copy is not None:
            self.memory.free(copy.request)

    # ANCHOR: follow
    def _follow(self, request: Request) -> DraftCopy:
        """The draft's copy of `request`, brought in line with it before drafting.

        Before: the copy (if any) holds the tokens it was given last time, then its drafts; K/V of its
        first request.num_computed_tokens tokens are in the draft's memory. `request` is the target's:
        since then it has emitted some tokens (a prefix of those drafts that the target agreed with, and
        one of its own) and may have been preempted, but its earlier tokens are unchanged.
        After: the copy's tokens equal the request's all_token_ids (its output list is the draft's own),
        `confirmed` is their number, `drafted` is empty, and its num_computed_tokens counts the leading
        tokens whose K/V it holds that are still right, all of them but never the request's last token
        (drafting starts from that token's logits, so it must be computed again); the draft's memory
        holds no block past those. A request the draft has not seen starts with nothing computed.
        """
        # Idea: which of the K/V the draft computed last step are still the request's tokens?
        # Stuck? `miniyaie hint 9.4` prints hints, one level at a time.
        # TODO(Task 9.4): The draft model's cache. Replace this line with your code.
        raise NotImplementedError("Chapter 9, Task 4: The draft model's cache — see book/src/ch09_speculative.md")
    # ANCHOR_END: follow

    def _make_room(self, copy: DraftCopy, k: int) -> bool:
        """Allocate the slots drafting k tokens writes (the new tokens and k - 1 drafts); False if they do not fit."""
        need = copy.request.num_tokens - copy.request.num_computed_tokens + k - 1
        if not self.memory.can_allocate(copy.request, need):
            return False
        self.memory.allocate(copy.request, need)
        return True

    @torch.inference_mode()
    def _next_tokens(self, chunks: list[ScheduledChunk]) -> list[int]:
        """The draft model's greedy token after each chunk (one forward pass for all of them)."""
        input_ids, positions, meta = self.runner.prepare(SchedulerOutput(chunks, []))
        rows = [end - 1 for end in accumulate(chunk.num_tokens for chunk in chunks)]  # each chunk's last token
        self.forward_passes += 1
        return self.runner.forward(input_ids, positions, meta, rows).argmax(dim=-1).tolist()
