"""Drafts from a smaller model: the target's own machinery, run on a second model with its own cache (Task 9.4).

A draft model that shares the target's tokenizer guesses the next k tokens one at a time, as a normal
decode would, only cheaper. It keeps a paged KV cache of its own, so that each step it computes only
what is new for it: the tokens the target emitted since it last drafted. Its drafts are its greedy
choices, a point mass on each, so the engine's verification stays one rule for every proposer (the
target's own token at each position; for a point mass that is exactly the rejection-sampling rule of
Task 9.2). The same model drafting for itself must have every draft accepted: a strong check that its
cache follows the request exactly.

Which copies are ready to draft, and the draft's own prefill budget, are given (backends/draft_prefill.py).
"""

from __future__ import annotations

from pathlib import Path

import torch

from miniyaie.backends.draft_prefill import DraftCopy, DraftPrefill
from miniyaie.engine.errors import EngineError
from miniyaie.engine.loading import load_model
from miniyaie.engine.model_runner import ModelRunner
from miniyaie.model import CausalLM, LoadedModel
from miniyaie.paged import PagedMemory, make_pool
from miniyaie.scheduler import Request, ScheduledChunk


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


class DraftModelProposer(DraftPrefill):
    """Proposes up to k drafts per request with `model`, batched over the requests of a step.

    num_blocks, block_size: the draft's own KV pool. A request that does not fit gets no drafts this step
    (the step still runs); finished requests' blocks come back through `forget`. max_prefill_tokens: the
    most tokens one call computes for the requests the draft is catching up with (DraftPrefill).
    """

    def __init__(self, model: CausalLM, num_blocks: int, block_size: int, max_prefill_tokens: int = 256):
        weight = model.lm_head.weight
        memory = PagedMemory(num_blocks, block_size)
        pool = make_pool(model.config, num_blocks, block_size, weight.dtype, weight.device)
        super().__init__(memory, ModelRunner(model, pool, memory), max_prefill_tokens)

    # ANCHOR: draft
    def draft(self, wanted: list[tuple[Request, int]]) -> dict[str, list[int]]:
        """Request id -> its drafts, for each (request, k) of `wanted` that fits in the draft's pool and that
        the draft has caught up with (one with more tokens to compute than this call's prefill budget has a
        chunk of them computed instead, and no entry).

        Each list holds exactly k tokens: the draft model's greedy continuation of the request's
        tokens, one token at a time as plain decoding would choose them. Requests that do not fit get
        no entry (the step runs without their drafts). Cost: at most max(k) forward passes of the
        draft model for the whole batch, run on each token the copy had not computed once and on each
        draft but the last once: no token of a request is computed twice in one call.
        Afterwards each copy's `drafted` holds its drafts and its memory holds the K/V of every token
        it computed (the request's tokens and every draft but the last).
        """
        ready = self._ready(wanted)  # followed (your _follow), caught up, room made (given)
        # Idea: k drafts may cost k passes for the whole batch: what must a copy's first pass compute, and each later one?
        # Stuck? `miniyaie hint 9.4` prints hints, one level at a time.
        # TODO(Task 9.4): The draft model's cache. Replace this line with your code.
        raise NotImplementedError("Chapter 9, Task 4: The draft model's cache — see book/src/ch09_speculative.md")
    # ANCHOR_END: draft

    # ANCHOR: follow
    def _follow(self, request: Request) -> DraftCopy:
        """The draft's copy of `request`, brought in line with it before drafting.

        Before: the copy (if any) holds the tokens it was given last time, then its drafts; K/V of its
        first request.num_computed_tokens tokens are in the draft's memory. `request` is the target's:
        since then it has emitted some tokens (after a verification, a prefix of those drafts that the
        target agreed with and one of its own; after steps that did not draft, several of its own, which
        may repeat some of the drafts or none) or none, and may have been preempted, but its earlier
        tokens are unchanged.
        After: the copy's tokens equal the request's all_token_ids (its output list is the draft's own),
        `confirmed` is their number, `drafted` is empty, and its num_computed_tokens counts the leading
        tokens whose K/V it holds that are still right (a draft's K/V are right only if it and every
        draft before it equal the request's tokens at their positions), all of them but never the
        request's last token (drafting starts from that token's logits, so it must be computed again);
        the draft's memory holds no block past those. A request the draft has not seen starts with
        nothing computed.
        """
        # Idea: which of the K/V the draft computed last step are still the request's tokens?
        # Stuck? `miniyaie hint 9.4` prints hints, one level at a time.
        # TODO(Task 9.4): The draft model's cache. Replace this line with your code.
        raise NotImplementedError("Chapter 9, Task 4: The draft model's cache — see book/src/ch09_speculative.md")
    # ANCHOR_END: follow
