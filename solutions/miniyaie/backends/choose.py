"""Choosing the attention backend by name: one place that every backend plugs into.

    cpu        the default on CPU: decode rows through a C++ loop over the paged cache, chunks batched
               (miniyaie/model/paged_cpu_attention.py; `torch` where the kernel cannot be built)
    torch      the whole step batched with torch ops (miniyaie/model/batched_attention.py)
    reference  chapter 0's per-sequence TorchAttentionBackend: readable, the one others are tested against
    triton     chapter 4's kernels (attention and the fused layers; the default on CUDA)
    auto       triton on CUDA (3.7x the torch backend on an H200: book/src/ch04_triton_kernels.md), cpu elsewhere
"""

from __future__ import annotations

import os

import torch

from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
from miniyaie.model import AttentionBackend, LayerOps, TorchAttentionBackend

BACKENDS = ("auto", "cpu", "torch", "reference", "triton")


def resolve_backend_name(name: str, device: torch.device | str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown attention_backend {name!r}; choose from {', '.join(BACKENDS)}")
    if name == "auto":
        return "triton" if torch.device(device).type == "cuda" else "cpu"
    return name


def prepare_backend(name: str, device: torch.device | str) -> None:
    """Call before loading a model: without a GPU, Triton must be switched to its interpreter
    before anything imports it (transformers does while it builds a model)."""
    if resolve_backend_name(name, device) == "triton" and torch.device(device).type != "cuda":
        os.environ.setdefault("TRITON_INTERPRET", "1")


def make_attention_backend(name: str, device: torch.device | str) -> AttentionBackend:
    """An attention backend instance for `name` (see the module docstring)."""
    name = resolve_backend_name(name, device)
    if name == "cpu":
        from miniyaie.backends.cpu.paged_attention import PagedCpuAttentionBackend

        return PagedCpuAttentionBackend()
    if name == "torch":
        return BatchedTorchAttentionBackend()
    if name == "reference":
        return TorchAttentionBackend()
    from miniyaie.kernels import TritonAttentionBackend  # chapter 4; imports triton

    return TritonAttentionBackend()


def make_layer_ops(name: str, device: torch.device | str) -> LayerOps:
    """The model's RMSNorm / RoPE / SwiGLU: fused Triton kernels with the triton backend, one-pass C++
    loops with the cpu backend, chapter 0's torch functions otherwise."""
    name = resolve_backend_name(name, device)
    if name == "triton":
        from miniyaie.kernels import TritonLayerOps

        return TritonLayerOps()
    if name == "cpu":
        from miniyaie.backends.cpu.layer_ops import CpuLayerOps

        return CpuLayerOps()
    return LayerOps()


def use_backend(model, name: str, device: torch.device | str) -> None:
    """Point `model` (a CausalLM) at backend `name`: its attention backend, its layer ops and,
    with the cpu backend, its linear layers on oneDNN with packed weights (model/cpu_linear.py)
    and glibc told to keep freed memory (model/cpu_allocator.py)."""
    from miniyaie.backends.cpu.linear import pack_linears, packing_available, unpack_linears

    model.backend = make_attention_backend(name, device)
    model.ops = make_layer_ops(name, device)
    if resolve_backend_name(name, device) == "cpu" and packing_available(device, next(model.parameters()).dtype):
        from miniyaie.backends.cpu.allocator import keep_freed_memory

        pack_linears(model)
        keep_freed_memory()  # process-wide, once: activations reuse freed memory (model/cpu_allocator.py)
    else:
        unpack_linears(model)  # the other backends run the model as chapter 0 wrote it
