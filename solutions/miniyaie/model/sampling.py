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
    # Nudge: for each token, what decides whether it stays: its own mass, or the mass ranked above it?
    # Hint 1: Rank the tokens by probability. A token stays when the tokens ranked strictly above it
    #   hold less than top_p: the mass *before* it, not the running total including it (that one
    #   drops the token that crosses the threshold). Then put the kept mass back in vocabulary
    #   order and divide by its sum.
    # Hint 2: Sort each row descending (keep the order); the mass before each sorted token is the
    #   cumulative sum minus the token itself; zero the sorted probabilities whose mass before is
    #   >= top_p; scatter them back to their vocabulary positions; renormalise.
    # Hint 3:
    #   sorted_probs, order = probs.sort(dim=-1, descending=True)
    #   mass_before = sorted_probs.cumsum(-1) - sorted_probs
    #   sorted_probs[mass_before >= top_p] = 0
    #   kept = zeros_like(probs).scatter(-1, order, sorted_probs)
    #   return kept / kept.sum(-1, keepdim=True)
    # BEGIN SOLUTION 0.5: Sampling and the prefill-decode loop
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum(dim=-1, keepdim=True)
    # END SOLUTION


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None) -> torch.Tensor:
    """One next token id per row of `logits` [num_rows, vocab]: an int64 tensor [num_rows].

    temperature 0 is greedy: the most likely token, no randomness.
    Otherwise a draw from softmax(logits / temperature), restricted by
    top_p_filter when top_p < 1, with every random number taken from
    `generator` (so the same seed gives the same tokens).
    """
    # Nudge: greedy is a special case that must not touch the generator; where do temperature and top-p act?
    # Hint 1: Temperature divides the logits before the softmax (small: sharper; large: flatter);
    #   0 would divide by zero and means argmax. Top-p filters the probabilities, not the logits.
    #   The draw must use the generator given, or seeded runs differ.
    # Hint 2: If temperature is 0 return the argmax of every row. Else softmax(logits / T) in
    #   float32; if top_p < 1 pass it through top_p_filter; draw one token per row with
    #   torch.multinomial(probs, 1, generator=generator) and drop the last dimension.
    # Hint 3:
    #   if temperature == 0: return logits.argmax(-1)
    #   probs = softmax(logits.float() / temperature, -1)
    #   if top_p < 1: probs = top_p_filter(probs, top_p)
    #   return multinomial(probs, 1, generator=generator).squeeze(-1)
    # BEGIN SOLUTION 0.5: Sampling and the prefill-decode loop
    if params.temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / params.temperature, dim=-1)
    if params.top_p < 1:
        probs = top_p_filter(probs, params.top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    # END SOLUTION
# ANCHOR_END: sampling
