"""The sampler's stages, each over a whole batch of rows with a setting per row (Tasks 5.2-5.4).

    penalties      repetition (prompt + output), presence and frequency (output)
    filters        top_k, top_p and min_p, all from one sort
    draw           inverse-CDF sampling, one uniform number per row (a seeded row's from its own generator)

Sampler (sampler.py) runs them in order, each on the rows that need it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


# ANCHOR: penalties
def apply_penalties(
    logits: torch.Tensor,
    seen: torch.Tensor,
    output_counts: torch.Tensor,
    repetition: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
) -> torch.Tensor:
    """Penalised logits [B, V].

    seen [B, V] bool: the token occurs in the prompt or the output.
    output_counts [B, V]: how often the token occurs in the output.
    repetition, presence, frequency [B]: each row's penalties.

    repetition (as in CTRL and transformers): a seen token's logit is divided
    by the penalty when positive and multiplied by it when negative.
    presence / frequency (as in OpenAI): logit -= presence * (count > 0) + frequency * count.
    """
    # Idea: three penalties, every row at once: no Python loop over rows or tokens.
    # Stuck? `miniyaie hint 5.2` prints hints, one level at a time.
    # TODO(Task 5.2): Penalties. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 2: Penalties — see book/src/ch05_engine.md')
# ANCHOR_END: penalties


# ANCHOR: filter
def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Set to -inf every token a row's top_k, top_p or min_p rules out (logits already / temperature).

    top_k [B] (long): keep the k most likely tokens (k <= 0: keep all).
    top_p [B]: of what top_k kept, keep the most likely tokens until their
      probability reaches top_p; the token that crosses top_p is kept
      (top_p >= 1 rules nothing out, however small a token's probability).
    min_p [B]: drop tokens whose probability is below min_p times the most likely one's.
    The most likely token always survives; tokens tied with the last kept one are kept too.
    """
    # Idea: each rule keeps a prefix of the row sorted by logit: find how long it is, sort once.
    # Stuck? `miniyaie hint 5.3` prints hints, one level at a time.
    # TODO(Task 5.3): top-k, top-p and min-p in one sort. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 3: top-k, top-p and min-p in one sort — see book/src/ch05_engine.md')
# ANCHOR_END: filter


# ANCHOR: draw
def draw(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token per row of probs [B, V] (rows need not sum to 1); a row with a generator draws only from it.

    Token i of a row is drawn with probability probs[i] / row total; a token
    with probability 0 is never drawn. A seeded row's draw depends only on its
    own generator: the same seed gives the same token whatever else is in the batch.
    """
    # Idea: one uniform number per row, placed on the row's cumulative distribution.
    # Stuck? `miniyaie hint 5.4` prints hints, one level at a time.
    # TODO(Task 5.4): One draw per row, seeded rows on their own generator. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 4: One draw per row, seeded rows on their own generator — see book/src/ch05_engine.md')
# ANCHOR_END: draw
