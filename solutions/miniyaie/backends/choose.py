"""Choosing the attention backend by name: one place that every backend plugs into.

    cpu        the default on CPU: decode rows through a C++ loop over the paged cache, chunks batched
               (miniyaie/backends/cpu/paged_attention.py; `torch` where the kernel cannot be built)
    torch      the whole step batched with torch ops (miniyaie/backends/batched_attention.py)
    reference  chapter 0's per-sequence TorchAttentionBackend: readable, the one others are tested against
    triton     chapter 4's kernels (attention and the fused layers; the default on CUDA)
    auto       triton on CUDA (3.7x the torch backend on an H200: book/src/ch04_triton_kernels.md), cpu elsewhere;
               but one that runs the learner's code whenever MINIYAIE_IMPL selects their tree for a chapter
               that a backend replaces: chapter 0 (model) -> reference, chapter 4 (kernels) -> triton
               (in Triton's interpreter without a GPU); both -> triton on CUDA, reference elsewhere
"""

from __future__ import annotations

import os

import torch

from miniyaie import _switch
from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
from miniyaie.model import AttentionBackend, LayerOps, TorchAttentionBackend

BACKENDS = ("auto", "cpu", "torch", "reference", "triton")
KV_CACHE_DTYPES = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}  # auto: the model's dtype
NARROW_CACHE_BACKENDS = ("cpu", "torch")  # read a K/V pool in another dtype than the model's, widening as they read

# What of a learner's chapter each backend leaves unrun (it swaps in its own layers or kernels).
_MODEL, _KERNELS = "your chapter 0 norms, rotary, SwiGLU and attention", "your chapter 4 kernels"
BYPASSED = {
    "cpu": {"model": _MODEL, "kernels": _KERNELS},
    "torch": {"model": "your chapter 0 attention", "kernels": _KERNELS},
    "reference": {"kernels": _KERNELS},
    "triton": {"model": _MODEL},
}
RUNS = {"model": "reference", "kernels": "triton"}  # the backend that runs each


def learner_chapters() -> set[str]:
    """The chapter packages a backend could bypass ("model", "kernels") whose selected tree is not the reference."""
    return {package for package in ("model", "kernels") if _switch.selected_root(package) != _switch.SOLUTIONS_ROOT}


def resolve_backend_name(name: str, device: torch.device | str) -> str:
    if name not in BACKENDS:
        raise ValueError(f"unknown attention_backend {name!r}; choose from {', '.join(BACKENDS)}")
    if name != "auto":
        return name
    cuda, mine = torch.device(device).type == "cuda", learner_chapters()
    if "kernels" in mine and (cuda or "model" not in mine):
        return "triton"
    if "model" in mine:
        return "reference"
    return "triton" if cuda else "cpu"


def describe_choice(name: str, device: torch.device | str) -> str | None:
    """One line for the command to print when a learner's tree is selected for chapter 0 or 4: which backend
    runs, which of their code it runs or bypasses, and how to choose another. None with the reference everywhere."""
    mine = learner_chapters()
    if not mine:
        return None
    chosen, cuda = resolve_backend_name(name, device), torch.device(device).type == "cuda"
    bypassed = {package: what for package, what in BYPASSED[chosen].items() if package in mine}
    if name != "auto":
        if not bypassed:
            return None
        others = " or ".join(RUNS[package] for package in bypassed)
        return (f"attention backend: {chosen}, as asked: it bypasses {' and '.join(bypassed.values())} "
                f"(--attention-backend {others} runs them)")
    runs = " and ".join(BYPASSED["cpu"][package] for package in sorted(mine) if package not in bypassed)
    line = f"attention backend: {chosen} (runs {runs}"
    if chosen == "triton" and not cuda:
        line += ", in Triton's interpreter: no GPU, so slow"
    fast = "triton" if cuda else "cpu"
    line += ")" if chosen == fast else f"; the fast {fast} backend would bypass them)"
    if bypassed:
        other = RUNS[next(iter(bypassed))]  # auto bypasses one chapter at most
        line += f"; it bypasses {' and '.join(bypassed.values())}: --attention-backend {other} runs them"
        line += " (slowly, in Triton's interpreter)" if other == "triton" and not cuda else ""
    return line


def kv_cache_dtype(setting: str, model_dtype: torch.dtype, backend: str, device: torch.device | str) -> torch.dtype:
    """The K/V pool's dtype (EngineConfig.kv_cache_dtype): the model's for "auto". A narrower pool holds more
    tokens in the same bytes; only the backends that widen K and V as they read them take one."""
    if setting not in KV_CACHE_DTYPES:
        raise ValueError(f"unknown kv_cache_dtype {setting!r}; choose from {', '.join(KV_CACHE_DTYPES)}")
    dtype, name = KV_CACHE_DTYPES[setting] or model_dtype, resolve_backend_name(backend, device)
    if dtype != model_dtype and name not in NARROW_CACHE_BACKENDS:
        raise ValueError(f"kv_cache_dtype {setting} differs from the model's {str(model_dtype).removeprefix('torch.')}: "
                         f"the {name} attention backend cannot read it; the cpu and torch backends can")
    return dtype


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


def use_backend(model, name: str, device: torch.device | str, quantization: str = "none") -> None:
    """Point `model` (a CausalLM) at backend `name`: its attention backend, its layer ops and,
    with the cpu backend, its linear layers on oneDNN with packed weights (backends/cpu/linear.py)
    and glibc told to keep freed memory (backends/cpu/allocator.py).

    `quantization` (EngineConfig's) is applied where the engine loads a model by name (engine/loading.py);
    a model given already loaded must already hold its weights in blocks (miniyaie.quant.quantize_model),
    else ValueError: the setting would do nothing ("auto" takes such a model as it is)."""
    from miniyaie.backends.cpu.linear import pack_linears, packing_available, unpack_linears

    if quantization not in ("none", "auto") and not any(hasattr(module, "qweight") for module in model.modules()):
        raise ValueError(f"quantization {quantization!r} is applied when the engine loads the model by name or path; "
                         "this model was given loaded, with float weights (miniyaie.quant.quantize_model puts them in blocks)")

    model.backend = make_attention_backend(name, device)
    model.ops = make_layer_ops(name, device)
    if resolve_backend_name(name, device) == "cpu" and packing_available(device, next(model.parameters()).dtype):
        from miniyaie.backends.cpu.allocator import keep_freed_memory

        pack_linears(model)
        keep_freed_memory()  # process-wide, once: activations reuse freed memory (backends/cpu/allocator.py)
    else:
        unpack_linears(model)  # the other backends run the model as chapter 0 wrote it
