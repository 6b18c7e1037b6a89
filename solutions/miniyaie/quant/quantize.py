"""Putting any model's float weights into blocks: choosing each block's step and minimum (Task 10.2).

A block's codes are only as good as the numbers they are decoded with. Those are the stored float16 scale
and minimum, not the float32 values they were computed from: the whole task is choosing them so that every
weight of the block lands within half a step of its decoded value, with steps no wider than they need be.
"""

from __future__ import annotations

import torch

from miniyaie.quant.blocks import QuantizedWeight, pack_nibbles

MAX_WEIGHT = 1e4  # float16 holds steps of weights up to here (65504 / 15 would be the limit for 4-bit codes)


def check_blocks(weight: torch.Tensor, group: int) -> None:
    """ValueError (one line) for a weight that cannot be cut into blocks of `group` along its input features."""
    if weight.dim() != 2:
        raise ValueError(f"a weight to quantize is a matrix [out_features, in_features], got shape {list(weight.shape)}")
    if group < 2 or weight.shape[1] % group:
        raise ValueError(f"a weight of shape {list(weight.shape)} cannot be cut into groups of {group} along its "
                         "input features: the width must be a multiple of the group")
    weight = weight.detach()
    if not bool(torch.isfinite(weight).all()) or float(weight.abs().max()) > MAX_WEIGHT:
        raise ValueError(f"weights must be finite and at most {MAX_WEIGHT:g} in size for float16 scales")


# ANCHOR: quantize
def quantize_int8(weight: torch.Tensor, group: int | None = None) -> QuantizedWeight:
    """Symmetric 8-bit codes: w ~ d * q with q in -127..127, one float16 step d per block of `group` weights of
    a row (group None: one block a row, int8 per output channel).

    Invariants, for every weight w of a block with stored step d (float16, what the decoder reads):
      |w - d * q| <= d / 2 (up to float32 rounding of that product);
      d is no wider than needed: at most one float16 spacing above max |w| / 127 of the block, and a
      step that is a float16 already is stored as it is (a block on its grid decodes exactly);
      a block of zeros has d = 0 and codes 0.
    ValueError (check_blocks) when the width is not a multiple of the group, or a weight is not finite.
    """
    # Nudge: the codes must be computed from the step that will be stored, not the one you computed.
    # Hint 1: The step that stretches the block's largest |w| to code 127 is max|w| / 127. Stored
    #   as float16 it changes; rounded to nearest it can come out smaller, and then the largest
    #   weight needs code 127.5 or so: clamped to 127, it misses by more than half a step. So
    #   round the step up to a float16 (the next float16 at or above it), and compute every code
    #   from that stored step widened back to float32. A block of zeros has step 0: divide by 1
    #   there instead (its codes are 0 either way).
    # Hint 2: check_blocks; view the weight as [N, K / group, group] in float32; step = amax(|w|)
    #   over the last axis / 127, rounded up to float16 (convert; where the float16 is below the
    #   float32 value, take torch.nextafter of it towards +inf); codes = round(w / step) clamped
    #   to -127..127 as int8 (step 0 replaced by 1 for the division).
    # Hint 3:
    #   group = group or K; check_blocks(weight, group)
    #   blocks = weight.float().reshape(N, K // group, group)
    #   half_up(v) = v.half(), moved to nextafter(.., +inf) where it came out below v
    #   d = half_up(blocks.abs().amax(-1) / 127)         # float16 [N, K / group]
    #   q = round(blocks / where(d > 0, d, 1).float()[..., None]).clamp(-127, 127).to(int8)
    #   return QuantizedWeight(q.reshape(N, K), d, None, 8, group, (N, K))
    # BEGIN SOLUTION 10.2: Choosing a block's step
    def to_half(values: torch.Tensor, towards: float) -> torch.Tensor:  # the float16 next to values, towards +-inf
        half = values.half()
        beyond = half.float() < values if towards > 0 else half.float() > values
        return torch.where(beyond, torch.nextafter(half, torch.full_like(half, towards)), half)

    group = group or weight.shape[-1]
    check_blocks(weight, group)
    n, k = weight.shape
    blocks = weight.detach().float().reshape(n, k // group, group)
    scales = to_half(blocks.abs().amax(-1) / 127, float("inf"))
    step = scales.float()
    codes = torch.round(blocks / torch.where(step > 0, step, 1)[..., None]).clamp(-127, 127).to(torch.int8)
    return QuantizedWeight(codes.reshape(n, k), scales, None, 8, group, (n, k))
    # END SOLUTION


def quantize_int4(weight: torch.Tensor, group: int = 32, symmetric: bool = False) -> QuantizedWeight:
    """4-bit codes in blocks of `group`: w ~ d * q + m with q in 0..15, codes packed with pack_nibbles.

    d and m are float16 (what the decoder reads), one each per block of a row. For every weight w of a
    block, |w - (d * q + m)| <= d / 2 (up to float32 rounding), and no step is wider than the block needs:
      with a minimum (symmetric False, GGUF's Q4_1): m is the block's own (not the row's), at most its
      smallest weight and at most one float16 spacing below it; d is at most one float16 spacing above
      (max w - m) / 15 for that stored m;
      symmetric: m = -8 * d (so q - 8 runs -8..7) and d is at most one float16 spacing above max |w| / 7.
    A step or minimum that is a float16 already is stored as it is (a block on its grid decodes exactly).
    A block of zeros has d = 0 and m = 0; a block of equal weights decodes within half a step too (d = 0
    only when its weight is a float16 already). ValueError as quantize_int8.
    """
    # Nudge: which two float16 numbers does the decoder read, and which way must each be rounded?
    # Hint 1: Codes 0..15 cover [m, m + 15 d]. Every weight must fall in that range (or within half a
    #   step of its ends): a minimum rounded up would leave the smallest weight below code 0, a step
    #   rounded down would leave the largest above code 15. So round m down and then the step up,
    #   computing the step from the stored m (its rounding widened the range) and each code from
    #   the stored d and m. The minimum is the block's, not the row's or the tensor's: one outlier
    #   would otherwise widen every block's step.
    # Hint 2: check_blocks; blocks [N, K / group, group] in float32. With a minimum: m = the
    #   block's min rounded down to float16; d = (block max - m) / 15 rounded up. Symmetric: d =
    #   block max |w| / 7 rounded up; m = -8 d (exact in float16). Codes: round((w - m) / d),
    #   clamped to 0..15 (d = 0: divide by 1), as uint8; pack them with pack_nibbles(codes, group).
    # Hint 3:
    #   blocks = weight.float().reshape(N, K // group, group)
    #   half_up / half_down: v.half(), moved one float16 up / down where it went the wrong way
    #   if symmetric: d = half_up(amax(|blocks|) / 7); m = -8 * d
    #   else: m = half_down(amin(blocks)); d = half_up((amax(blocks) - m.float()) / 15)
    #   q = round((blocks - m.float()[..., None]) / where(d > 0, d, 1).float()[..., None]).clamp(0, 15)
    #   return QuantizedWeight(pack_nibbles(q.to(uint8).reshape(N, K), group), d, m, 4, group, (N, K))
    # BEGIN SOLUTION 10.2: Choosing a block's step
    def to_half(values: torch.Tensor, towards: float) -> torch.Tensor:  # the float16 next to values, towards +-inf
        half = values.half()
        beyond = half.float() < values if towards > 0 else half.float() > values
        return torch.where(beyond, torch.nextafter(half, torch.full_like(half, towards)), half)

    check_blocks(weight, group)
    n, k = weight.shape
    blocks = weight.detach().float().reshape(n, k // group, group)
    if symmetric:
        scales = to_half(blocks.abs().amax(-1) / 7, float("inf"))  # -max and max land on codes -7 and 7
        mins = -8 * scales
    else:
        mins = to_half(blocks.amin(-1), float("-inf"))
        scales = to_half((blocks.amax(-1) - mins.float()) / 15, float("inf"))
    step, low = scales.float(), mins.float()
    q = torch.round((blocks - low[..., None]) / torch.where(step > 0, step, 1)[..., None]).clamp(0, 15)
    return QuantizedWeight(pack_nibbles(q.to(torch.uint8).reshape(n, k), group), scales, mins, 4, group, (n, k))

    # END SOLUTION
# ANCHOR_END: quantize
