"""Choosing the next token from logits: greedy, temperature and top-p (nucleus)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0  # 0 means greedy
    top_p: float = 1.0
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


# ANCHOR: sampling
def top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, per row; renormalised.

    probs: [num_rows, vocab], rows summing to 1. A token is dropped only if
    the tokens ranked above it already reach top_p, so the token that
    crosses the threshold is kept (and with top_p = 1 nothing is dropped).
    Returns probabilities of the same shape, zero outside the kept set,
    each row summing to 1. Example: [0.4, 0.35, 0.25] at top_p 0.6 keeps the
    first two ([0.533, 0.467, 0]).
    """
    # Idea: for each token, what decides whether it stays: its own mass, or the mass ranked above it?
    # Stuck? `miniyaie hint 0.5` prints hints, one level at a time.
    # TODO(Task 0.5): Sampling and the prefill-decode loop. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 5: Sampling and the prefill-decode loop — see book/src/ch00_model.md')


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> torch.Tensor:
    """One next token id per row of `logits` [num_rows, vocab]: an int64 tensor [num_rows].

    temperature 0 is greedy: the most likely token, no randomness.
    Otherwise a draw from softmax(logits / temperature), restricted by
    top_p_filter when top_p < 1, with every random number taken from
    `generator` (so the same seed gives the same tokens).
    """
    # Idea: greedy is a special case that must not touch the generator; where do temperature and top-p act?
    # Stuck? `miniyaie hint 0.5` prints hints, one level at a time.
    # TODO(Task 0.5): Sampling and the prefill-decode loop. Replace this line with your code.
    raise NotImplementedError('Chapter 0, Task 5: Sampling and the prefill-decode loop — see book/src/ch00_model.md')
# ANCHOR_END: sampling
