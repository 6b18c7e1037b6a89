"""Weight blocks: a group of G weights of one output row shares a scale d (and, for 4-bit codes, a minimum m).

    4-bit: w = d * q + m, q in 0..15. Two codes a byte: byte j of a group holds code j in its low nibble
           and code j + G/2 in its high one. That is GGUF's Q4_1 (G = 32), so a Q4_1 file's codes are used
           as they are; symmetric int4 is the same with m = -8 d.
    8-bit: w = d * q, q a signed byte. GGUF's Q8_0 is G = 32; int8 per output channel is one group a row.

Scales and minimums are float16, as in GGUF's blocks (so a 4-bit weight costs 5 bits with them, an 8-bit
one 8.5 at groups of 32). `dequantize` is the definition (and the oracle of every kernel): float32
weights, d and m widened to float32, as transformers' GGUF loader makes them for the float32 path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class QuantizedWeight:
    """A [out_features, in_features] weight in blocks of `group` along in_features."""

    codes: torch.Tensor  # 4-bit: uint8 [N, K / 2] (two codes a byte); 8-bit: int8 [N, K]
    scales: torch.Tensor  # float16 [N, K / group]
    mins: torch.Tensor | None  # float16 [N, K / group] for 4-bit codes, None for 8-bit
    bits: int
    group: int
    shape: tuple[int, int]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.mins) if t is not None)

    def dequantize(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The float32 weights (of `rows` only, when given: an embedding's lookup)."""
        codes, scales = (self.codes, self.scales) if rows is None else (self.codes[rows], self.scales[rows])
        n, k, scales = codes.shape[0], self.shape[1], scales.float()
        if self.bits == 8:
            return (codes.view(n, k // self.group, self.group).float() * scales[..., None]).view(n, k)
        mins = (self.mins if rows is None else self.mins[rows]).float()
        half = codes.view(n, k // self.group, self.group // 2)
        q = torch.cat([half & 15, half >> 4], dim=-1).float()  # low nibbles are the group's first half
        return (q * scales[..., None] + mins[..., None]).view(n, k)

    def rows(self, order: torch.Tensor) -> QuantizedWeight:
        """The same weight with its output rows reordered (rows are independent blocks)."""
        return QuantizedWeight(self.codes[order], self.scales[order], None if self.mins is None else self.mins[order],
                               self.bits, self.group, self.shape)


def _check(weight: torch.Tensor, group: int) -> None:
    if weight.dim() != 2 or weight.shape[1] % group:
        raise ValueError(f"a weight of shape {list(weight.shape)} cannot be cut into groups of {group} along its "
                         "input features: the width must be a multiple of the group")


def _half_up(values: torch.Tensor) -> torch.Tensor:
    """float16 values at least `values` (a step rounded down would leave the largest weight out of range)."""
    half = values.half()
    return torch.where(half.float() < values, torch.nextafter(half, torch.full_like(half, float("inf"))), half)


def _half_down(values: torch.Tensor) -> torch.Tensor:
    half = values.half()
    return torch.where(half.float() > values, torch.nextafter(half, torch.full_like(half, float("-inf"))), half)


def quantize_int8(weight: torch.Tensor, group: int | None = None) -> QuantizedWeight:
    """Symmetric 8-bit codes, one scale per output channel (group None) or per group: d = max |w| / 127."""
    group = group or weight.shape[1]
    _check(weight, group)
    n, k = weight.shape
    blocks = weight.detach().float().reshape(n, k // group, group)
    scales = _half_up(blocks.abs().amax(-1) / 127)
    step = scales.float()
    codes = torch.round(blocks / torch.where(step > 0, step, 1)[..., None]).clamp(-127, 127).to(torch.int8)
    return QuantizedWeight(codes.reshape(n, k), scales, None, 8, group, (n, k))


def quantize_int4(weight: torch.Tensor, group: int = 32, symmetric: bool = False) -> QuantizedWeight:
    """4-bit codes in groups: with a minimum (d = (max - min) / 15, m = min, as Q4_1) or symmetric (q - 8 in -8..7,
    d = max |w| / 7, m = -8 d). Every weight is within d / 2 of its dequantized value."""
    _check(weight, group)
    n, k = weight.shape
    blocks = weight.detach().float().reshape(n, k // group, group)
    if symmetric:
        scales = _half_up(blocks.abs().amax(-1) / 7)  # -max and max land on codes -7 and 7
        mins = -8 * scales
    else:
        mins = _half_down(blocks.amin(-1))
        scales = _half_up((blocks.amax(-1) - mins.float()) / 15)
    step, low = scales.float(), mins.float()
    q = torch.round((blocks - low[..., None]) / torch.where(step > 0, step, 1)[..., None]).clamp(0, 15).to(torch.uint8)
    half = group // 2
    codes = q[..., :half] | (q[..., half:] << 4)
    return QuantizedWeight(codes.reshape(n, k // 2).contiguous(), scales, mins, 4, group, (n, k))


GGUF_BLOCKS = {"Q4_1": (4, 20), "Q8_0": (8, 34)}  # bits, bytes per block of 32: fp16 scale [, fp16 minimum], codes


def from_gguf_blocks(kind: str, data: np.ndarray, shape: tuple[int, int]) -> QuantizedWeight:
    """A GGUF tensor's raw blocks (uint8 [N, K / 32 * block bytes], as gguf.GGUFReader gives them) as they are."""
    if kind not in GGUF_BLOCKS:
        raise ValueError(f"GGUF blocks of type {kind} are not read as they are (only {', '.join(GGUF_BLOCKS)})")
    bits, size = GGUF_BLOCKS[kind]
    n, k = shape
    raw = np.ascontiguousarray(data).reshape(n, k // 32, size)
    scales = torch.from_numpy(raw[..., :2].copy().view(np.float16)[..., 0])
    if bits == 4:
        mins = torch.from_numpy(raw[..., 2:4].copy().view(np.float16)[..., 0])
        codes = torch.from_numpy(raw[..., 4:].reshape(n, k // 2).copy())
        return QuantizedWeight(codes, scales, mins, 4, 32, (n, k))
    codes = torch.from_numpy(raw[..., 2:].reshape(n, k).copy().view(np.int8))
    return QuantizedWeight(codes, scales, None, 8, 32, (n, k))
