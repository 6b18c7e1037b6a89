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
        # Nudge: k drafts may cost k passes for the whole batch: what must a copy's first pass compute, and each later one?
        # Hint 1: The copies are ready (followed, room made). The first token of each copy's
        #   drafts needs what the draft has not computed yet: everything from its computed
        #   count to its end, at least the last token. Every later draft needs only the draft
        #   before it. Batch each round over all the copies that still want drafts, so that
        #   k drafts cost k passes however many requests there are.
        # Hint 2: Round one: a ScheduledChunk per copy from num_computed_tokens to num_tokens.
        #   Each round: self._next_tokens(chunks) gives one token per chunk; mark the chunk
        #   computed, append the token to the copy's output and to its drafted list. The next
        #   round's chunks: one token (the last draft) for each copy with fewer than k drafts.
        #   Return every ready copy's drafted list.
        # Hint 3:
        #   chunks = [ScheduledChunk(c.request, computed, num_tokens - computed) for c, _ in ready]
        #   while chunks:
        #       for chunk, token in zip(chunks, self._next_tokens(chunks)):
        #           chunk.request.num_computed_tokens = chunk.start + chunk.num_tokens
        #           chunk.request.output_token_ids.append(token); copies[id].drafted.append(token)
        #       chunks = [ScheduledChunk(c.request, num_tokens - 1, 1) for c, k in ready if len(c.drafted) < k]
        #   return {id: list(c.drafted) for c, _ in ready}
        # BEGIN SOLUTION 9.4: The draft model's cache
        chunks = [ScheduledChunk(c.request, c.request.num_computed_tokens, c.request.num_tokens - c.request.num_computed_tokens)
                  for c, _ in ready]
        while chunks:
            for chunk, token in zip(chunks, self._next_tokens(chunks)):
                request = chunk.request
                request.num_computed_tokens = chunk.start + chunk.num_tokens
                request.output_token_ids.append(token)
                self.copies[request.request_id].drafted.append(token)
            chunks = [ScheduledChunk(c.request, c.request.num_tokens - 1, 1) for c, k in ready if len(c.drafted) < k]
        return {c.request.request_id: list(c.drafted) for c, _ in ready}
        # END SOLUTION
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
        # Nudge: which of the K/V the draft computed last step are still the request's tokens?
        # Hint 1: Last time the draft computed its K/V for the confirmed tokens and for all but
        #   its last draft. The target then kept some drafts and wrote one token of its own (or
        #   nothing at all, when the step left the request out; or several tokens of its own,
        #   when steps ran without drafting, repeating some drafts or none), so the draft's K/V
        #   stay right up to the first position where its tokens and the request's differ; everything
        #   after is K/V of a rejected guess and must go, block and all, or the next drafts
        #   would attend to it. And drafting needs the logits of the request's last token: if
        #   the draft already holds that token's K/V, it must compute it once more.
        # Hint 2: Make the copy if the request is new (a Request with the same prompt, nothing
        #   computed). Otherwise count the positions from `confirmed` on where the copy's
        #   tokens equal the request's, stopping at the first difference or at the end of the
        #   computed ones, and never past the request's last token (its logits are the first
        #   draft's, and only computing a token gives them); that is the new computed count;
        #   truncate the memory to it. Then take
        #   the request's output as the copy's, set confirmed, clear drafted.
        # Hint 3:
        #   copy = copies.get(id) or DraftCopy(Request(id, list(prompt), max_tokens)); store it
        #   ours, theirs = copy.request.all_token_ids, request.all_token_ids
        #   end = min(ours computed, len(theirs) - 1); keep = min(copy.confirmed, end)
        #   while keep < end and ours[keep] == theirs[keep]: keep += 1
        #   copy.request.num_computed_tokens = keep; memory.truncate(copy.request, keep)
        #   copy.request.output_token_ids = list(request.output_token_ids); confirmed = num_tokens; drafted = []
        # BEGIN SOLUTION 9.4: The draft model's cache
        copy = self.copies.get(request.request_id)
        if copy is None:
            copy = self.copies[request.request_id] = DraftCopy(
                Request(request.request_id, list(request.prompt_token_ids), request.max_tokens))
        ours, theirs = copy.request.all_token_ids, request.all_token_ids
        end = min(copy.request.num_computed_tokens, len(theirs) - 1)  # the last token's logits start the drafts
        keep = min(copy.confirmed, end)  # the confirmed tokens were the request's when the draft was given them
        while keep < end and ours[keep] == theirs[keep]:
            keep += 1
        copy.request.num_computed_tokens = keep
        self.memory.truncate(copy.request, keep)
        copy.request.output_token_ids = list(request.output_token_ids)
        copy.confirmed, copy.drafted = request.num_tokens, []
        return copy
        # END SOLUTION
    # ANCHOR_END: follow
