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
    # Idea: what goes into the model at each step, where does each token's K/V live, and when does a sequence leave?
    # Stuck? `miniyaie hint 0.5` prints hints, one level at a time.
    # TODO(Task 0.5): Sampling and the prefill-decode loop. Replace these lines with your code.
    raise NotImplementedError('Chapter 0, Task 5: Sampling and the prefill-decode loop — see book/src/ch00_model.md')
    yield  # never runs: it keeps this function a generator, as its callers expect
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
    # Idea: the stream interleaves the prompts: how do its events find their Generation?
    # Stuck? `miniyaie hint 0.5` prints hints, one level at a time.
    # TODO(Task 0.5): Sampling and the prefill-decode loop. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 5: Sampling and the prefill-decode loop — see book/src/ch00_model.md')
# ANCHOR_END: generate
