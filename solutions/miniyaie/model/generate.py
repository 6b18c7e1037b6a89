"""Generation with a KV cache: prefill every prompt once, then decode one token per step.

This is chapter 0's static batch: all prompts start together and each gets
one contiguous region of the cache (one block as long as its maximum
length). The engine of chapter 5 replaces it with continuous batching over a
paged cache; the model and the attention interface stay the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from miniyaie.model.attention import AttentionMetadata
from miniyaie.model.kv_cache import KVCache
from miniyaie.model.sampling import SamplingParams, sample
from miniyaie.model.transformer import CausalLM


class PromptTooLongError(ValueError):
    """The prompt leaves no room in the model's context for a single new token."""


@dataclass
class TokenEvent:
    seq: int  # index of the prompt
    token_id: int
    finish_reason: str | None  # "stop" (end of sequence), "length", or None while running


@dataclass
class Generation:
    token_ids: list[int]
    finish_reason: str


# ANCHOR: generate_stream
def generate_stream(
    model: CausalLM,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    eos_token_ids: Sequence[int] = (),
) -> Iterator[TokenEvent]:
    """Generate for every prompt at once, yielding each new token as soon as it is sampled.

    Errors, raised before any token: ValueError for an empty prompt,
    PromptTooLongError for a prompt of len >= max_position_embeddings (no
    room for one new token).

    Each step yields one TokenEvent per sequence still running, in prompt
    order; a sequence's events come in the order of its tokens. A sequence
    finishes with the event of its last token, whose finish_reason is
    "stop" when that token is in eos_token_ids (unless params.ignore_eos;
    the end-of-sequence token is yielded), else "length" when prompt plus
    output reach len(prompt) + params.max_tokens or the model's context,
    whichever is smaller; "stop" wins when both hold. Every other event has
    finish_reason None.

    Tokens come from `sample` (model/sampling.py) on the logits of each
    sequence's last position, with one torch.Generator seeded by
    params.seed when it is set (the same seed gives the same tokens). With
    temperature 0 the tokens equal transformers' greedy generate.

    The KV cache does the work: every prompt token and every generated
    token except the last goes through `model` exactly once, the prompts
    all together in the first call, then one token per running sequence
    per call. The cache and the AttentionMetadata are this function's to
    build (KVCache, model/attention.py); the model's dtype and device are
    those of model.lm_head.weight.
    """
    # Nudge: what goes into the model at each step, where does each token's K/V live, and when does a sequence leave?
    # Hint 1: Keep, per sequence, its tokens so far and how many of them the cache already holds:
    #   the tokens not yet cached are the ones to run (the whole prompt first, then the one token
    #   sampled last). Give each sequence a contiguous run of slots as long as the longest it can
    #   get (prompt + max_tokens, capped at the context): one block per sequence. A step packs the
    #   running sequences' new tokens together; only each sequence's last row is sampled.
    # Hint 2: Check the prompts. max_len[s] = min(len(prompt) + max_tokens, context); block_size =
    #   max of them; KVCache with len(prompts) * block_size slots in lm_head's dtype and device;
    #   a seeded Generator if params.seed is set. While some sequence runs: for each running s take
    #   tokens[s][computed[s]:]; input_ids = them concatenated; positions = computed[s] ..
    #   len(tokens[s]) - 1 per sequence; slot = s * block_size + position; block_tables = [[s]] per
    #   running s; query_lens and seq_lens from the chunks; run the model, take the row at the end
    #   of each sequence's chunk (cumsum of query_lens - 1), compute_logits, sample. For each
    #   sequence: mark its tokens computed, append the token, decide stop (eos, unless
    #   ignore_eos) before length (len(tokens) >= max_len), yield the event, keep it if unfinished.
    # Hint 3:
    #   check every prompt (empty -> ValueError, len >= context -> PromptTooLongError)
    #   max_lens = [min(len(p) + max_tokens, context) for p in prompts]; block = max(max_lens)
    #   cache = KVCache(config, len(prompts) * block, lm_head dtype, device); generator if seed
    #   tokens = copies of prompts; computed = [0] * n; running = [0 .. n-1]
    #   while running:
    #       new = [tokens[s][computed[s]:] for s in running]
    #       positions = concat of range(computed[s], len(tokens[s])) over running s
    #       meta = AttentionMetadata(query_lens=[len(c) for c in new], seq_lens=[len(tokens[s])...],
    #                                slot_mapping=positions + s * block per token, block_tables=[[s] ...], block_size=block)
    #       hidden = model(concat(new), positions, cache, meta)
    #       next = sample(model.compute_logits(hidden[cumsum(query_lens) - 1]), params, generator)
    #       for s, token in zip(running, next):
    #           computed[s] = len(tokens[s]); tokens[s].append(token)
    #           reason = "stop" if token in eos and not ignore_eos else "length" if len(tokens[s]) >= max_lens[s] else None
    #           yield TokenEvent(s, token, reason); keep s running if reason is None
    # BEGIN SOLUTION 0.5: Sampling and the prefill-decode loop
    context_len = model.config.max_position_embeddings
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty")
        if len(prompt) >= context_len:
            raise PromptTooLongError(f"prompt has {len(prompt)} tokens but the model's context is {context_len} tokens")
    device = model.lm_head.weight.device
    max_lens = [min(len(p) + params.max_tokens, context_len) for p in prompts]
    block_size = max(max_lens)  # one contiguous block per sequence
    cache = KVCache(model.config, len(prompts) * block_size, model.lm_head.weight.dtype, device)
    generator = torch.Generator(device).manual_seed(params.seed) if params.seed is not None else None

    tokens = [list(p) for p in prompts]  # prompt + output so far
    computed = [0] * len(prompts)  # tokens whose K/V are in the cache
    running = list(range(len(prompts)))
    while running:
        # Every running sequence feeds the tokens not yet in the cache:
        # the whole prompt on the first step (prefill), then one token (decode).
        new = [tokens[s][computed[s]:] for s in running]
        input_ids = torch.tensor([t for chunk in new for t in chunk], device=device)
        positions = torch.tensor([p for s in running for p in range(computed[s], len(tokens[s]))], device=device)
        meta = AttentionMetadata(
            query_lens=[len(chunk) for chunk in new],
            seq_lens=[len(tokens[s]) for s in running],
            slot_mapping=positions + torch.tensor(
                [s * block_size for s, chunk in zip(running, new) for _ in chunk], device=device
            ),
            block_tables=torch.tensor([[s] for s in running], device=device),
            block_size=block_size,
        )
        hidden = model(input_ids, positions, cache, meta)
        last_rows = torch.tensor(meta.query_lens, device=device).cumsum(0) - 1
        next_tokens = sample(model.compute_logits(hidden[last_rows]), params, generator).tolist()

        still_running = []
        for s, token in zip(running, next_tokens):
            computed[s] = len(tokens[s])
            tokens[s].append(token)
            if token in eos_token_ids and not params.ignore_eos:
                reason = "stop"
            elif len(tokens[s]) >= max_lens[s]:
                reason = "length"
            else:
                reason = None
                still_running.append(s)
            yield TokenEvent(s, token, reason)
        running = still_running
    # END SOLUTION
# ANCHOR_END: generate_stream


# ANCHOR: generate
def generate(
    model: CausalLM,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    eos_token_ids: Sequence[int] = (),
) -> list[Generation]:
    """The new tokens of every prompt, once all are finished: one Generation per prompt, in prompt order.

    Same tokens, finish reasons and errors as generate_stream (each
    Generation holds a prompt's new tokens in order and its finish_reason).
    """
    # Nudge: the stream interleaves the prompts: how do its events find their Generation?
    # Hint 1: Every event names its prompt (event.seq); a prompt's tokens arrive in order, and
    #   only its last event carries a finish reason.
    # Hint 2: Start one empty Generation per prompt; for every event of generate_stream append
    #   its token to outputs[event.seq] and, when it has a finish reason, record it.
    # Hint 3:
    #   outputs = [Generation([], "") for each prompt]
    #   for event in generate_stream(model, prompts, params, eos_token_ids):
    #       outputs[event.seq].token_ids.append(event.token_id)
    #       if event.finish_reason: outputs[event.seq].finish_reason = event.finish_reason
    #   return outputs
    # BEGIN SOLUTION 0.5: Sampling and the prefill-decode loop
    outputs = [Generation([], "") for _ in prompts]
    for event in generate_stream(model, prompts, params, eos_token_ids):
        outputs[event.seq].token_ids.append(event.token_id)
        if event.finish_reason:
            outputs[event.seq].finish_reason = event.finish_reason
    return outputs
    # END SOLUTION
# ANCHOR_END: generate
