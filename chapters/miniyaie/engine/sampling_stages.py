"""The sampler's stages, each over a whole batch of rows with a setting per row (Tasks 5.2-5.4).

    penalties      the rows' ragged histories as tensors; repetition (prompt + output),
                   presence and frequency (output)
    filters        top_k, top_p and min_p, all from one sort
    draw           inverse-CDF sampling, one uniform number per row (a seeded row's from its own generator)

Sampler (sampler.py) runs them in order, each on the rows that need it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


# ANCHOR: penalties
def token_histories(
    prompts: Sequence[Sequence[int]], outputs: Sequence[Sequence[int]], vocab: int, device=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the penalties need to know about B rows' histories: (seen, output_counts).

    prompts[b] and outputs[b] are row b's token ids (ids in [0, vocab)); the lists may be empty
    and of any lengths. seen [B, V] bool: True where token v occurs in row b's prompt or output.
    output_counts [B, V] float32: how many times v occurs in row b's output (the prompt does not
    count). Both on `device`. The cost is a few tensor operations for the whole batch: no
    Python loop over the vocabulary, nor one per token.
    """
    # Idea: B lists of different lengths become one tensor once the short ones are padded; where does the padding go?
    # Stuck? `miniyaie hint 5.2` prints hints, one level at a time.
    # TODO(Task 5.2): Penalties. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 2: Penalties — see book/src/ch05_engine.md')


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

    repetition (CTRL's, as transformers applies it): a penalty above 1 makes every seen token
    less likely whatever the sign of its logit (below 1, more likely); an unseen token's logit is
    left exactly as it was. With 2.0 a seen logit 3.0 becomes 1.5 and -1.0 becomes -2.0.
    presence and frequency (OpenAI's): a token of the output loses presence once and frequency
    for each time it occurs there; the prompt does not count. With presence 0.5 and frequency
    0.25, a token generated 3 times loses 1.25.
    Each row is penalised by its own settings and history alone.
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
    # Idea: a seeded row must not depend on its batch: how does one random number pick a token from an unnormalised row?
    # Stuck? `miniyaie hint 5.4` prints hints, one level at a time.
    # TODO(Task 5.4): One draw per row, seeded rows on their own generator. Replace this line with your code.
    raise NotImplementedError('Chapter 5, Task 4: One draw per row, seeded rows on their own generator — see book/src/ch05_engine.md')
# ANCHOR_END: draw
