"""`bench quality`'s K/V variants: transformers' forward with its keys and values rounded as the engine's cache holds them.

`--kv-cache-dtype bfloat16` keeps every K and V row in bfloat16 and the kernels widen each to float32 as they
read it (backends/cpu/paged_attention.py). The quality bench measures transformers' model, which has no such
cache, so a variant "<weights>+kv-bf16" (or "kv-bf16": float32 weights) rounds the same numbers at the same
place: each layer's keys after the rotation and its values, before attention reads them or the cache keeps
them. Queries stay float32, as in the engine. Same model, same arithmetic up to the order of the sums.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager

import torch
from torch import nn

KV_DTYPES = {"kv-bf16": torch.bfloat16}


def split_kv(name: str) -> tuple[str, torch.dtype | None]:
    """'gguf+kv-bf16' -> ('gguf', torch.bfloat16); 'kv-bf16' -> ('none', torch.bfloat16); 'int8' -> ('int8', None)."""
    weights, _, kv = name.strip().rpartition("+") if "+" in name else ("", "", name.strip())
    if kv in KV_DTYPES:
        return weights or "none", KV_DTYPES[kv]
    if "+" in name:
        raise ValueError(f"unknown K/V variant {kv!r} in {name!r}; choose from {', '.join(KV_DTYPES)}")
    return name.strip(), None


def _round(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype).to(x.dtype)


@contextmanager
def kv_rounded(model: nn.Module, dtype: torch.dtype | None):
    """Within the block, `model` (a transformers Llama/Qwen) keeps its keys and values rounded to `dtype`."""
    if dtype is None:
        yield model
        return
    attentions = [m for name, m in model.named_modules() if name.endswith("self_attn")]
    modules = {sys.modules[type(a).__module__] for a in attentions}
    originals = {module: module.apply_rotary_pos_emb for module in modules}

    def rotate_then_round(rotate):
        def rotated(q, k, *args, **kwargs):
            q, k = rotate(q, k, *args, **kwargs)
            return q, _round(k, dtype)
        return rotated

    hooks = [a.v_proj.register_forward_hook(lambda _m, _i, out: _round(out, dtype)) for a in attentions]
    try:
        for module, rotate in originals.items():
            module.apply_rotary_pos_emb = rotate_then_round(rotate)
        yield model
    finally:
        for module, rotate in originals.items():
            module.apply_rotary_pos_emb = rotate
        for hook in hooks:
            hook.remove()
