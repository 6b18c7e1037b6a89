"""Choosing the attention backend by name: one place that every backend plugs into.

    torch      the default on CPU: the whole step batched (miniyaie/model/batched_attention.py)
    reference  chapter 0's per-sequence TorchAttentionBackend: readable, the one others are tested against
    triton     chapter 4's kernels (the default on CUDA once they land)
    auto       triton on CUDA, torch elsewhere
"""

from __future__ import annotations

import torch

from miniyaie.model import AttentionBackend, TorchAttentionBackend
from miniyaie.model.batched_attention import BatchedTorchAttentionBackend

BACKENDS = ("auto", "torch", "reference", "triton")


def resolve_backend_name(name: str, device: torch.device | str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown attention_backend {name!r}; choose from {', '.join(BACKENDS)}")
    if name == "auto":
        return "torch"  # chapter 4 makes this "triton" on CUDA
    return name


def make_attention_backend(name: str, device: torch.device | str) -> AttentionBackend:
    """An attention backend instance for `name` (see the module docstring)."""
    name = resolve_backend_name(name, device)
    if name == "torch":
        return BatchedTorchAttentionBackend()
    if name == "reference":
        return TorchAttentionBackend()
    raise ValueError(f"attention_backend {name!r} is not available yet (chapter 4)")
