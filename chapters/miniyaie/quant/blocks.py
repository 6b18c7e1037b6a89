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
    # Idea: a byte pairs a code of the group's first half with the code half a group later.
    # Stuck? `miniyaie hint 10.1` prints hints, one level at a time.
    # TODO(Task 10.1): The 4-bit layout and the blocks' meaning. Replace this line with your code.
    raise NotImplementedError("Chapter 10, Task 1: The 4-bit layout and the blocks' meaning — see book/src/ch10_quantization.md")


def unpack_nibbles(packed: torch.Tensor, group: int) -> torch.Tensor:
    """The inverse of pack_nibbles: bytes uint8 [..., K / 2] back to codes uint8 [..., K].

    ValueError when group is odd or 2 * packed.shape[-1] is not a multiple of it.

    >>> unpack_nibbles(torch.tensor([49, 66], dtype=torch.uint8), 4)
    tensor([1, 2, 3, 4], dtype=torch.uint8)
    """
    # Idea: undo the packing group by group: which nibble holds the group's first half?
    # Stuck? `miniyaie hint 10.1` prints hints, one level at a time.
    # TODO(Task 10.1): The 4-bit layout and the blocks' meaning. Replace this line with your code.
    raise NotImplementedError("Chapter 10, Task 1: The 4-bit layout and the blocks' meaning — see book/src/ch10_quantization.md")
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
        # Idea: each weight needs its own block's scale and minimum, and its code from the right nibble.
        # Stuck? `miniyaie hint 10.1` prints hints, one level at a time.
        # TODO(Task 10.1): The 4-bit layout and the blocks' meaning. Replace this line with your code.
        raise NotImplementedError("Chapter 10, Task 1: The 4-bit layout and the blocks' meaning — see book/src/ch10_quantization.md")
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
