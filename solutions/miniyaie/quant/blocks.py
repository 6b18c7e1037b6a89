"""Weight blocks: a group of G weights of one output row shares a scale d (and, for 4-bit codes, a minimum m).

    4-bit: w = d * q + m, q in 0..15, two codes a byte (pack_nibbles says which two). That is GGUF's
           Q4_1 (G = 32), so a Q4_1 file's bytes are used as they are; symmetric int4 is the same with m = -8 d.
    8-bit: w = d * q, q a signed byte. GGUF's Q8_0 is G = 32; int8 per output channel is one group a row.

Scales and minimums are float16, as in GGUF's blocks: a 4-bit weight costs 5 bits with them, an 8-bit one
8.5 at groups of 32. `dequantize` is the definition, and the oracle of every kernel (Task 10.1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


# ANCHOR: nibbles
def pack_nibbles(q: torch.Tensor, group: int) -> torch.Tensor:
    """4-bit codes uint8 [..., K] (each 0..15) as bytes uint8 [..., K / 2], two codes a byte.

    The layout is GGUF's Q4_1 (and the kernels'): within each group of `group` codes, byte j of the
    group holds code j in its low nibble (bits 0-3) and code j + group / 2 in its high nibble. The
    bytes of group g are bytes g * group / 2 .. (g + 1) * group / 2 - 1 of the row.
    ValueError when group is odd or K is not a multiple of it, or when a code is above 15.

    >>> pack_nibbles(torch.tensor([1, 2, 3, 4], dtype=torch.uint8), 4)   # codes 0, 1 low; 2, 3 high
    tensor([49, 66], dtype=torch.uint8)
    """
    # Nudge: a byte pairs a code of the group's first half with the code half a group later.
    # Hint 1: Cut the last axis into groups; in each, the first half of the codes goes to the low
    #   nibbles and the second half to the high nibbles of the same bytes, in order. Shifting a
    #   code left by 4 moves it to the high nibble; OR joins the two halves. Check the arguments
    #   before touching the data, or a bad shape fails with a reshape error instead of yours.
    # Hint 2: Check group (even, divides K) and the codes (none above 15). View the codes as
    #   [..., K / group, group]; take the first group / 2 and the last group / 2 along the new
    #   last axis; the bytes are first | (second << 4); view the result back as [..., K / 2].
    # Hint 3:
    #   if group % 2 or K % group: raise ValueError; if q.max() > 15: raise ValueError
    #   blocks = q.reshape(*q.shape[:-1], K // group, group)
    #   low, high = blocks[..., : group // 2], blocks[..., group // 2 :]
    #   return (low | (high << 4)).reshape(*q.shape[:-1], K // 2)
    # BEGIN SOLUTION 10.1: The 4-bit layout and the blocks' meaning
    k = q.shape[-1]
    if group % 2 or k % group:
        raise ValueError(f"{k} codes cannot be cut into groups of {group} (an even number that divides them)")
    if q.numel() and int(q.max()) > 15:
        raise ValueError(f"a 4-bit code is at most 15, got {int(q.max())}")
    blocks = q.to(torch.uint8).reshape(*q.shape[:-1], k // group, group)
    low, high = blocks[..., : group // 2], blocks[..., group // 2 :]
    return (low | (high << 4)).reshape(*q.shape[:-1], k // 2)
    # END SOLUTION


def unpack_nibbles(packed: torch.Tensor, group: int) -> torch.Tensor:
    """The inverse of pack_nibbles: bytes uint8 [..., K / 2] back to codes uint8 [..., K].

    ValueError when group is odd or 2 * packed.shape[-1] is not a multiple of it.

    >>> unpack_nibbles(torch.tensor([49, 66], dtype=torch.uint8), 4)
    tensor([1, 2, 3, 4], dtype=torch.uint8)
    """
    # Nudge: undo the packing group by group: which nibble holds the group's first half?
    # Hint 1: A byte's low nibble is byte & 15 and its high nibble byte >> 4 (a uint8 shifts in
    #   zeros). The low nibbles of a group's bytes are its first half of codes, the high nibbles
    #   its second half: concatenate them per group, not interleave them byte by byte.
    # Hint 2: Check group against the width 2 * packed.shape[-1]. View the bytes as
    #   [..., groups, group / 2]; concatenate (bytes & 15) and (bytes >> 4) along the last axis;
    #   view back as [..., K].
    # Hint 3:
    #   k = 2 * packed.shape[-1]; if group % 2 or k % group: raise ValueError
    #   half = packed.reshape(*packed.shape[:-1], k // group, group // 2)
    #   return torch.cat([half & 15, half >> 4], dim=-1).reshape(*packed.shape[:-1], k)
    # BEGIN SOLUTION 10.1: The 4-bit layout and the blocks' meaning
    k = 2 * packed.shape[-1]
    if group % 2 or k % group:
        raise ValueError(f"{k} codes cannot be cut into groups of {group} (an even number that divides them)")
    half = packed.reshape(*packed.shape[:-1], k // group, group // 2)
    return torch.cat([half & 15, half >> 4], dim=-1).reshape(*packed.shape[:-1], k)
    # END SOLUTION
# ANCHOR_END: nibbles


@dataclass
class QuantizedWeight:
    """A [out_features, in_features] weight in blocks of `group` along in_features (see the module's docstring).

    codes:  4-bit: uint8 [N, K / 2] in pack_nibbles's layout; 8-bit: int8 [N, K]
    scales: float16 [N, K / group], the step d of each block
    mins:   float16 [N, K / group], the minimum m of each block, for 4-bit codes; None for 8-bit codes
    """

    codes: torch.Tensor
    scales: torch.Tensor
    mins: torch.Tensor | None
    bits: int
    group: int
    shape: tuple[int, int]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.scales, self.mins) if t is not None)

    # ANCHOR: dequantize
    def dequantize(self, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The float32 weights [N, K] (or [len(rows), K] of the output rows `rows` only: an embedding's lookup).

        Every weight is its block's (d * q) + m (d * q for 8-bit codes): d and m widened to float32 first,
        then the product and the sum each in float32: bit for bit what the gguf package's dequantization of Q4_1 and Q8_0
        gives, and so the same weights as the float32 model transformers loads from a GGUF file.
        """
        # Nudge: each weight needs its own block's scale and minimum, and its code from the right nibble.
        # Hint 1: Index first (rows, when given, picks rows of the codes, scales and mins alike),
        #   then decode: the block of weight k of a row is k // group, so a block's d and m apply to
        #   `group` consecutive weights. Shape the codes as [rows, blocks, group] and broadcast d and
        #   m over the last axis. Widen everything to float32 before multiplying; multiply, then add.
        # Hint 2: Take codes, scales (and mins) of the rows asked for. 8-bit: codes as float32,
        #   viewed [n, K / group, group], times scales[..., None]. 4-bit: unpack the nibbles
        #   (unpack_nibbles), same view, times scales[..., None], plus mins[..., None]. View [n, K].
        # Hint 3:
        #   codes, d, m = (self.codes, self.scales, self.mins) or their [rows]
        #   q = codes if bits == 8 else unpack_nibbles(codes, group)
        #   w = q.float().view(n, K // group, group) * d.float()[..., None]
        #   if bits == 4: w = w + m.float()[..., None]
        #   return w.view(n, K)
        # BEGIN SOLUTION 10.1: The 4-bit layout and the blocks' meaning
        pick = (lambda t: t) if rows is None else (lambda t: t[rows])
        codes, scales = pick(self.codes), pick(self.scales).float()
        n, k = codes.shape[0], self.shape[1]
        q = codes if self.bits == 8 else unpack_nibbles(codes, self.group)
        weights = q.float().view(n, k // self.group, self.group) * scales[..., None]
        if self.bits == 4:
            weights = weights + pick(self.mins).float()[..., None]
        return weights.view(n, k)
        # END SOLUTION
    # ANCHOR_END: dequantize

    def rows(self, order: torch.Tensor) -> QuantizedWeight:
        """The same weight with its output rows reordered (rows are independent blocks)."""
        return QuantizedWeight(self.codes[order], self.scales[order], None if self.mins is None else self.mins[order],
                               self.bits, self.group, self.shape)


GGUF_BLOCKS = {"Q4_1": (4, 20), "Q8_0": (8, 34)}  # bits, bytes per block of 32: fp16 scale [, fp16 minimum], codes


def from_gguf_blocks(kind: str, data: np.ndarray, shape: tuple[int, int]) -> QuantizedWeight:
    """A GGUF tensor's raw blocks (uint8 [N, K / 32 * block bytes], as gguf.GGUFReader gives them) as they are.

    ValueError, naming the type, for a block type no kernel here reads (Q4_K, Q6_K, ...).
    """
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
