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
    # Nudge: B lists of different lengths become one tensor once the short ones are padded; where does the padding go?
    # Hint 1: A scatter turns a [B, L] tensor of ids into a [B, V] tensor of marks or counts in one
    #   operation, but the rows are ragged and the padding must count for nothing. Give the
    #   padding its own column: fill with the id V (one past the vocabulary), scatter into
    #   [B, V + 1], then drop the last column. A scatter_add_ of ones counts; a scatter_ of
    #   True marks.
    # Hint 2: padded(lists) -> [B, max(1, longest)] int64 filled with vocab, each row's ids at its
    #   start. counts =
    #   zeros [B, V + 1] scatter_add_ (dim 1) of ones at padded(outputs). seen = zeros bool
    #   [B, V + 1] scatter_ True at padded(prompts). Return seen[:, :V] | (counts[:, :V] > 0)
    #   and counts[:, :V].
    # Hint 3:
    #   out = padded(outputs); counts = zeros(B, V + 1).scatter_add_(1, out, ones_like(out, float))
    #   seen = zeros(B, V + 1, bool); seen.scatter_(1, padded(prompts), True)
    #   return seen[:, :V] | (counts[:, :V] > 0), counts[:, :V]
    # BEGIN SOLUTION 5.2: Penalties
    def padded(lists):
        width = max(1, max(len(x) for x in lists))
        ids = torch.full((len(lists), width), vocab, dtype=torch.int64, device=device)  # vocab = padding column
        for i, x in enumerate(lists):
            if x:
                ids[i, : len(x)] = torch.as_tensor(list(x), dtype=torch.int64, device=device)
        return ids

    out = padded(outputs)
    counts = torch.zeros(len(outputs), vocab + 1, device=device).scatter_add_(1, out, torch.ones_like(out, dtype=torch.float32))
    seen = torch.zeros(len(prompts), vocab + 1, dtype=torch.bool, device=device)
    seen.scatter_(1, padded(prompts), True)
    return seen[:, :vocab] | (counts[:, :vocab] > 0), counts[:, :vocab]
    # END SOLUTION


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
    # Nudge: three penalties, every row at once: no Python loop over rows or tokens.
    # Hint 1: Each row has its own penalties, so a [B] vector must meet a [B, V] matrix. The
    #   repetition penalty touches only seen tokens and pushes a logit towards "less likely"
    #   whatever its sign (divide a positive one, multiply a negative one); an unseen token's
    #   logit is left exactly as it was. Presence and frequency look at the output counts only.
    # Hint 2: Broadcast each penalty as a column ([:, None]). Choose, elementwise, between the
    #   divided and the multiplied logit by the sign, and between that and the original by
    #   `seen`. Then subtract frequency times the counts and presence times (counts > 0), both
    #   converted to the logits' dtype.
    # Hint 3:
    #   rep = repetition[:, None]
    #   logits = where(seen, where(logits > 0, logits / rep, logits * rep), logits)
    #   counts = output_counts.to(logits.dtype)
    #   return logits - frequency[:, None] * counts - presence[:, None] * (counts > 0)
    # BEGIN SOLUTION 5.2: Penalties
    rep = repetition[:, None]
    logits = torch.where(seen, torch.where(logits > 0, logits / rep, logits * rep), logits)
    counts = output_counts.to(logits.dtype)
    return logits - frequency[:, None] * counts - presence[:, None] * (counts > 0).to(logits.dtype)
    # END SOLUTION
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
    # Nudge: each rule keeps a prefix of the row sorted by logit: find how long it is, sort once.
    # Hint 1: All three rules keep the most likely tokens and drop the rest, so each row's
    #   survivors are the first m tokens of its descending sort, and a token survives when its
    #   logit is at least that of the m-th (which also keeps ties). top_p is measured on what
    #   top_k kept, renormalised; min_p compares with the most likely token's probability.
    # Hint 2: Sort each row descending (a partial sort, topk, suffices when every row has a
    #   top_k). Mark ranks at or beyond k as dropped; softmax the sorted logits with those set to
    #   -inf; also drop a rank when the probability mass ranked above it already reaches top_p
    #   (only when top_p < 1), or when its probability is below min_p times the first one's.
    #   Count the survivors (at least 1), read the logit of the last survivor, and mask every
    #   logit below it.
    # Hint 3:
    #   k = where(top_k > 0, top_k, V).clamp(max=V); sorted = topk or sort, width = max(k)
    #   drop = arange(width)[None] >= k[:, None]
    #   probs = softmax(sorted.masked_fill(drop, -inf)); before = probs.cumsum(-1) - probs
    #   drop |= (before >= top_p[:, None]) & (top_p[:, None] < 1); drop |= probs < min_p[:, None] * probs[:, :1]
    #   last = sorted.gather(1, ((~drop).sum(-1).clamp(min=1) - 1)[:, None])
    #   return logits.masked_fill(logits < last, -inf)
    # BEGIN SOLUTION 5.3: top-k, top-p and min-p in one sort
    vocab = logits.shape[-1]
    k = torch.where(top_k > 0, top_k, vocab).clamp(max=vocab)
    width = int(k.max())
    if width < vocab:  # every row has a top_k: a partial sort is enough
        sorted_logits = logits.topk(width, dim=-1).values
    else:
        sorted_logits = logits.sort(dim=-1, descending=True).values
    drop = torch.arange(width, device=logits.device)[None, :] >= k[:, None]
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    drop |= (mass_before >= top_p[:, None]) & (top_p[:, None] < 1)  # a float32 running sum reaches 1.0 early
    drop |= probs < min_p[:, None] * probs[:, :1]
    num_kept = (~drop).sum(dim=-1).clamp(min=1)
    last_kept = sorted_logits.gather(1, (num_kept - 1)[:, None])
    return logits.masked_fill(logits < last_kept, float("-inf"))
    # END SOLUTION
# ANCHOR_END: filter


# ANCHOR: draw
def draw(probs: torch.Tensor, generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token per row of probs [B, V] (rows need not sum to 1); a row with a generator draws only from it.

    Token i of a row is drawn with probability probs[i] / row total; a token
    with probability 0 is never drawn. A seeded row's draw depends only on its
    own generator: the same seed gives the same token whatever else is in the batch.
    """
    # Nudge: a seeded row must not depend on its batch: how does one random number pick a token from an unnormalised row?
    # Hint 1: Inverse-CDF sampling: lay the row's probabilities end to end on [0, total) and
    #   see which piece a uniform point lands in. The point must be scaled by the row's total
    #   (rows are not normalised), must never reach the total, and a seeded row must take its
    #   number from its own generator and nobody else's, or batching changes its answer.
    # Hint 2: Make one uniform number per row: one draw from each seeded row's generator, one
    #   batched draw for all unseeded rows. Compute each row's cumulative sum in float64, scale
    #   u by the row total and clamp it just below the total (nextafter). The token is the
    #   first index whose cumulative sum is strictly above the target (searchsorted, right).
    # Hint 3:
    #   u = empty(B, float64); for each seeded row r: u[r] = rand(1, generator=g_r)
    #   u[unseeded rows] = rand(len(unseeded))
    #   cdf = probs.double().cumsum(-1); total = cdf[:, -1]
    #   target = minimum(u * total, nextafter(total, 0))
    #   return searchsorted(cdf, target[:, None], right=True).squeeze(1)
    # BEGIN SOLUTION 5.4: One draw per row, seeded rows on their own generator
    u = torch.empty(len(generators), dtype=torch.float64, device=probs.device)
    unseeded = [row for row, generator in enumerate(generators) if generator is None]
    for row, generator in enumerate(generators):
        if generator is not None:
            u[row] = torch.rand(1, generator=generator, dtype=torch.float64, device=probs.device)[0]
    if unseeded:
        u[unseeded] = torch.rand(len(unseeded), dtype=torch.float64, device=probs.device)
    cdf = probs.double().cumsum(dim=-1)
    total = cdf[:, -1]
    target = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)
    # END SOLUTION
# ANCHOR_END: draw
