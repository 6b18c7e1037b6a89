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


def _check_prompts(prompts: Sequence[Sequence[int]], context_len: int) -> None:
    for i, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"prompt {i} is empty")
        if len(prompt) >= context_len:
            raise PromptTooLongError(
                f"prompt has {len(prompt)} tokens but the model's context is {context_len} tokens"
            )


# ANCHOR: generate_stream
def generate_stream(
    model: CausalLM,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    eos_token_ids: Sequence[int] = (),
) -> Iterator[TokenEvent]:
    """Yield every new token of every prompt as soon as it is sampled."""
    context_len = model.config.max_position_embeddings
    _check_prompts(prompts, context_len)
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
# ANCHOR_END: generate_stream


def generate(
    model: CausalLM,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    eos_token_ids: Sequence[int] = (),
) -> list[Generation]:
    """The new tokens of every prompt, once all are finished."""
    outputs = [Generation([], "") for _ in prompts]
    for event in generate_stream(model, prompts, params, eos_token_ids):
        outputs[event.seq].token_ids.append(event.token_id)
        if event.finish_reason:
            outputs[event.seq].finish_reason = event.finish_reason
    return outputs
