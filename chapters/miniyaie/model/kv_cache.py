"""The KV cache storage: one flat tensor of slots per layer, for K and for V."""

from __future__ import annotations

import torch

from miniyaie.model.config import ModelConfig


class KVCache:
    """K and V of every layer, `num_slots` token slots each.

    Layout [num_layers, num_slots, num_kv_heads, head_dim]: a token's K/V in a
    layer is one row, found through the slot mapping (see attention.py).
    """

    def __init__(self, config: ModelConfig, num_slots: int, dtype: torch.dtype, device: str | torch.device = "cpu"):
        shape = (config.num_layers, num_slots, config.num_kv_heads, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    def layer(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k[index], self.v[index]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes
