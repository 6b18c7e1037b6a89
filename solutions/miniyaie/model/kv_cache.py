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
        # Nudge: one tensor for K and one for V: which of the four dimensions comes first, and why?
        # Hint 1: A layer reads and writes only its own K/V, so the layer is the outermost dimension:
        #   layer(i) is then a view of one contiguous block, [num_slots, num_kv_heads, head_dim].
        # Hint 2: self.k and self.v: zeros of shape (num_layers, num_slots, num_kv_heads, head_dim) in
        #   the given dtype and device.
        # Hint 3:
        #   shape = (num_layers, num_slots, num_kv_heads, head_dim)
        #   self.k = zeros(shape, dtype, device); self.v = the same
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        shape = (config.num_layers, num_slots, config.num_kv_heads, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        # END SOLUTION

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s K and V, [num_slots, num_kv_heads, head_dim] each: views, so writes land in the cache."""
        # Nudge: a copy would be written to and thrown away: how do you hand out a part that stays in the cache?
        # Hint 1: Indexing the first dimension of a tensor gives a view that shares its memory.
        # Hint 2: Return self.k indexed by the layer and self.v indexed by the layer.
        # Hint 3:
        #   return self.k[index], self.v[index]
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        return self.k[index], self.v[index]
        # END SOLUTION

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
# ANCHOR_END: kv_cache
