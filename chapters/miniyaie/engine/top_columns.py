"""Provided: the filters and the draw of sampled rows on the columns that can survive, when that is exact.

When every filtering row has a top_k (0 < k, the largest no more than
MAX_COLUMNS), no token outside a row's `width = max(top_k)` best can survive
Task 5.3's filter, and the filter itself reads nothing else: it takes the
`width` best logits of each row (topk), softmaxes them, and keeps what is at
least its last kept logit. So `sample_top_columns`

1. takes the `width` best logits of each row once (topk, no sort of the vocabulary);
2. runs your `filter_logits` on those columns: the same values in the same
   order as on the whole row, so the same arithmetic and the same last kept
   logit, bit for bit;
3. masks the whole row below that logit and softmaxes it, exactly as the plain
   path does (the same probabilities, bit for bit);
4. runs your `draw` on the kept columns only, in token-id order: the draw's
   running sum skips only zeros (adding 0.0 changes no float64 sum), so every
   row draws the token the whole row would have given, with the same seeds.

A batch where a row's last kept logit is tied with tokens beyond its `width`
best (they are kept too), a row without a top_k, or a top_k above
MAX_COLUMNS takes the plain path: your filter on the whole rows, softmax,
your draw. COUNTS says how many rows took
each way (`columns`, `whole rows`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import torch

from miniyaie.engine.sampling_stages import draw, filter_logits

MAX_COLUMNS = 1024  # beyond this a topk stops being much cheaper than a sort
COUNTS: Counter = Counter()  # rows drawn on their top-k columns ("columns") or on the whole row ("whole rows")


def plain(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
          generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """The definition: filter the whole rows, softmax, draw (one token id per row)."""
    COUNTS["whole rows"] += len(generators)
    return draw(torch.softmax(filter_logits(scaled, top_k, top_p, min_p), dim=-1), generators)


def filter_on_columns(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                      min_p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(filter_logits(scaled, top_k, top_p, min_p) bit for bit, each row's kept token ids in id order [B, width]),
    from your filter on each row's `width` best columns; None when that cannot be exact (see the module's docstring)."""
    vocab = scaled.shape[-1]
    if not len(top_k) or int(top_k.min()) <= 0:
        return None
    width = int(top_k.max())
    if width > MAX_COLUMNS or width >= vocab:
        return None
    best = scaled.topk(width, dim=-1)  # values descending; the filter needs nothing else
    kept = filter_logits(best.values, top_k, top_p, min_p)  # your filter, on the columns it reads
    survives = (kept == best.values) & (best.values > float("-inf"))
    last = torch.where(survives, best.values, float("inf")).amin(dim=-1, keepdim=True)
    edge = last[:, 0] == best.values[:, -1]  # rows that may keep tokens tied with their last column, beyond it
    if bool(edge.any()) and bool(((scaled[edge] >= last[edge]).sum(dim=-1) > survives[edge].sum(dim=-1)).any()):
        return None
    return scaled.masked_fill(scaled < last, float("-inf")), best.indices.sort(dim=-1).values


def sample_top_columns(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor,
                       generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One token id per row of `scaled` [B, V] (logits already / temperature): exactly `plain`'s tokens."""
    narrowed = filter_on_columns(scaled, top_k, top_p, min_p)
    if narrowed is None:
        return plain(scaled, top_k, top_p, min_p, generators)
    filtered, ids = narrowed
    probs = torch.softmax(filtered, dim=-1)  # the plain path's, bit for bit
    COUNTS["columns"] += len(generators)
    return ids.gather(1, draw(probs.gather(1, ids), generators)[:, None]).squeeze(1)  # your draw, on the kept columns
