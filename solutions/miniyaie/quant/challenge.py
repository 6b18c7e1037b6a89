"""The reference's entry to chapter 10's challenge (`miniyaie challenge 10`): read it once you have a score of your own.

It stays in solutions/: `course sync` does not copy a chapter package's
challenge.py into chapters/, where the learner writes their own.

The reference tries, for every block, ranges cut short by 0, 1/32, 2/32 or
3/32 of the block's range at either end; for each it computes the codes,
then refits the step and minimum to those codes by least squares (rounded
to float16, the codes computed again), and keeps whichever decodes closest
to the block's weights. That is the idea of llama.cpp's `make_qkx`. The
hidden states are random, so every input feature matters alike: the score
follows the weights' own squared error, and more candidates, more refits or
a search per block that also moves single codes go further.
"""

from __future__ import annotations

import torch

from miniyaie.quant.blocks import QuantizedWeight, pack_nibbles

GROUP = 32
SHRINK, REFITS = [i / 32 for i in range(4)], 1  # fractions of the range cut off each end; least-squares refits


def quantize(weight: torch.Tensor) -> QuantizedWeight:
    """Per block: try ranges shrunk from either end, keep the one whose stored numbers decode closest, then
    refit step and minimum to the chosen codes by least squares (the idea of llama.cpp's make_qkx)."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // GROUP, GROUP)
    low, high = w.amin(-1), w.amax(-1)
    span = (high - low).clamp_min(1e-12)

    def codes_for(d, m):
        return torch.round((w - m[..., None]) / torch.where(d > 0, d, 1)[..., None]).clamp(0, 15)

    def error(d, m, q):
        return ((q * d[..., None] + m[..., None] - w) ** 2).sum(-1)

    def stored(d, m):
        return d.half().float(), m.half().float()

    best_d, best_m = stored(span / 15, low)
    best_q = codes_for(best_d, best_m)
    best_e = error(best_d, best_m, best_q)
    for a in SHRINK:
        for b in SHRINK:
            d, m = stored(span * (1 - a - b) / 15, low + a * span)
            q = codes_for(d, m)
            for _ in range(REFITS):  # least squares d, m for these codes, then the codes for those
                s_q, s_w, s_qq, s_qw = q.sum(-1), w.sum(-1), (q * q).sum(-1), (q * w).sum(-1)
                det = GROUP * s_qq - s_q * s_q
                fit_d = torch.where(det > 0, (GROUP * s_qw - s_q * s_w) / det.clamp_min(1e-12), d)
                fit_m = torch.where(det > 0, (s_w - fit_d * s_q) / GROUP, m)
                d, m = stored(fit_d.clamp_min(0), fit_m)
                q = codes_for(d, m)
            e = error(d, m, q)
            better = e < best_e
            best_d, best_m, best_e = (torch.where(better, d, best_d), torch.where(better, m, best_m),
                                      torch.where(better, e, best_e))
            best_q = torch.where(better[..., None], q, best_q)
    codes = pack_nibbles(best_q.to(torch.uint8).reshape(n, k), GROUP)
    return QuantizedWeight(codes, best_d.half(), best_m.half(), 4, GROUP, (n, k))
