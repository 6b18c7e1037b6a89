"""The KV cache storage: one flat tensor of slots per layer, for K and for V."""

from __future__ import annotations

import torch

from miniyaie.model.config import ModelConfig


# ANCHOR: kv_cache
class KVCache:
    """K and V of every layer, `num_slots` token slots each.

    Layout [num_layers, num_slots, num_kv_heads, head_dim], zeros at first (in the dtype, on the device asked
    for): a token's K/V in a layer is one row, found through the slot mapping (see attention.py).
    """

    def __init__(self, config: ModelConfig, num_slots: int, dtype: torch.dtype, device: str | torch.device = "cpu"):
        # Idea: one tensor for K and one for V: which of the four dimensions comes first, and why?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s K and V, [num_slots, num_kv_heads, head_dim] each: views, so writes land in the cache."""
        # Idea: a copy would be written to and thrown away: how do you hand out a part that stays in the cache?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
# ANCHOR_END: kv_cache
