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
    # Idea: the codes must be computed from the step that will be stored, not the one you computed.
    # Stuck? `miniyaie hint 10.2` prints hints, one level at a time.
    # TODO(Task 10.2): Choosing a block's step. Replace this line with your code.
    raise NotImplementedError("Chapter 10, Task 2: Choosing a block's step — see book/src/ch10_quantization.md")


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
    # Idea: which two float16 numbers does the decoder read, and which way must each be rounded?
    # Stuck? `miniyaie hint 10.2` prints hints, one level at a time.
    # TODO(Task 10.2): Choosing a block's step. Replace this line with your code.
    raise NotImplementedError("Chapter 10, Task 2: Choosing a block's step — see book/src/ch10_quantization.md")
# ANCHOR_END: quantize
