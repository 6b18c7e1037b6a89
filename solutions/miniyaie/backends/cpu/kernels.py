"""The C++ kernels of the CPU backend: built once with the machine's g++, loaded with ctypes.

The sources make one library: paged_decode_attention.cpp (decode attention
over the paged cache), paged_chunk_attention.cpp (prefill and extend chunks
over it), layer_ops.cpp (RMSNorm with its residual add,
RoPE, SiLU-times-up, each in one pass; used by layer_ops.py) and
quant_matmul.cpp (linears over 4- and 8-bit weight blocks; miniyaie/quant) and quant_a8.cpp
(the same with activations rounded to 8 bits: the opt-in -a8 schemes, miniyaie/weights; steps of two
rows or more on AMX tiles in quant_a8_amx.cpp where the CPU has them, over codes laid out for them at load;
prefill chunks on the tiles' bfloat16 multiplies in quant_bf16_amx.cpp; without AMX, steps of several rows on
AVX512-VNNI over panels of 16 columns in quant_a8_panels.cpp; the choice among them in quant_a8_dispatch.cpp), and
decode_stack.cpp (a decode step's
layers through those kernels in one call: decode_stack.py), and lora_delta.cpp (a step's LoRA deltas of
a projection for every adapter in one call: lora_delta.py, chapter 11). The two
attention kernels take their vector width from cpu_vector.h: the width of
the machine's own registers (16 floats with AVX-512, 8 with AVX2).

Why C++ and not torch ops: on a CPU, attention over a paged cache written with
torch ops must first gather each sequence's K/V into one tensor, then read it
again in SDPA; at long contexts that copy is most of the step. A loop that
follows the block table reads every K and V row once, where it lies
(paged_decode_attention.cpp). It is plain C++ with no torch headers, so it
compiles in about two seconds (the three files side by side); the library
is cached under ~/.cache/miniyaie/kernels, keyed by the sources, the flags
and the CPU.

`load()` returns None, and says why once, where no compiler is found or the
build fails: the engine then uses the batched torch backend for every row,
and torch ops for the element-wise layers.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import torch

SOURCES = tuple(Path(__file__).with_name(name) for name in (
    "paged_decode_attention.cpp", "paged_chunk_attention.cpp", "layer_ops.cpp", "quant_matmul.cpp", "quant_a8.cpp",
    "quant_a8_amx.cpp", "quant_bf16_amx.cpp", "quant_a8_panels.cpp", "quant_a8_dispatch.cpp", "decode_stack.cpp",
    "lora_delta.cpp"))
HEADERS = tuple(Path(__file__).with_name(name) for name in ("cpu_vector.h", "quant_blocks.h", "paged_decode_units.h", "paged_decode_bf16.h"))  # included: in the cache key
# -ffast-math lets g++ vectorise expf (glibc's libmvec) and reorder the sums. It is given to the
# compile step only: linked with it, the library would switch the whole process's floating
# point to flush-to-zero when it loads (gcc's crtfastmath), and torch's results with it.
COMPILE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffast-math", "-fPIC", "-std=c++17", "-c")
LINK_FLAGS = ("-shared", "-fopenmp")
CACHE_ENV = "MINIYAIE_KERNEL_CACHE"  # where built libraries go (default ~/.cache/miniyaie/kernels)
log = logging.getLogger(__name__)

# Pointers go in as plain addresses (tensor.data_ptr()): a ctypes.cast per argument costs more
# than the element-wise kernels themselves at decode sizes.
_i64, _ptr, _int, _f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_float
SIGNATURES = {
    "paged_decode_attention": [_ptr, _ptr, _ptr, _ptr, _i64, _ptr, _ptr, _i64, _ptr, _i64, _i64, _i64, _i64, _i64, _f32, _ptr, _int, _int],
    "paged_chunk_attention": [_ptr, _ptr, _ptr, _ptr, _i64, _ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _i64, _f32, _ptr, _int, _int],
    "add_rms_norm": [_ptr, _ptr, _ptr, _f32, _i64, _i64, _ptr, _ptr, _int],
    "rotary_in_place": [_ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _int],
    "silu_mul_in_place": [_ptr, _ptr, _i64, _int],
    "silu_mul_rows": [_ptr, _i64, _i64, _ptr, _int],
    "quant_matmul_q4": [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _i64, _i64, _ptr, _int],
    "quant_matmul_q8": [_ptr, _i64, _i64, _ptr, _ptr, _i64, _i64, _ptr, _int],
    "dequantize_blocks": [_ptr, _int, _ptr, _ptr, _i64, _i64, _i64, _ptr, _int],
    "quant_matmul_rows": [_ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _i64, _ptr, _int],
    "quant_a8_isa": [],
    "quantize_activations_q8": [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _int],
    "quant_matmul_a8": [_ptr, _ptr, _ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _i64, _ptr, _int],
    "quant_matmul_a8_float": [_ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _i64, _ptr, _int],
    "quant_a8_amx_ready": [],
    "quant_a8_set_amx_rows": [_i64, _i64],
    "quant_bf16_amx_ready": [],
    "quant_matmul_bf16_tiles": [_ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _ptr, _int],
    "quant_a8_set_panel_rows": [_i64],
    "quant_a8_panels_ready": [],
    "quant_matmul_a8_panels": [_ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _ptr, _int],
    "quant_matmul_a8_layer": [_ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _int],
    "quant_a8_tile_bytes": [_i64, _i64, _int],
    "quant_a8_tile_halves": [_i64, _i64],
    "quant_a8_lay_out_tiles": [_ptr, _int, _ptr, _ptr, _i64, _i64, _i64, _ptr, _ptr, _ptr],
    "quant_matmul_a8_tiles": [_ptr, _i64, _i64, _ptr, _int, _ptr, _ptr, _i64, _ptr, _int],
    "decode_stack_fields": [],
    "decode_stack_lora_fields": [],
    "decode_stack": [_ptr, _i64, _i64, _ptr, _i64, _f32, _ptr, _ptr, _ptr, _i64, _i64, _i64, _ptr, _i64, _ptr, _ptr, _ptr, _i64,
                     _i64, _f32, _int, _int, _ptr],
    "lora_delta": [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _i64, _ptr, _i64, _i64, _i64, _ptr, _ptr, _i64, _int],  # lora_delta.py
}

CACHE_TYPES = {torch.float32: 0, torch.bfloat16: 1}  # the K/V pools the attention kernels read (float32 arithmetic)
RESTYPES = {"paged_chunk_attention": ctypes.c_int, "quant_a8_isa": ctypes.c_int, "quant_a8_amx_ready": ctypes.c_int, "quant_bf16_amx_ready": ctypes.c_int, "quant_a8_panels_ready": ctypes.c_int,
            "quant_a8_tile_bytes": ctypes.c_int64, "quant_a8_tile_halves": ctypes.c_int64,
            "decode_stack_fields": ctypes.c_int, "decode_stack_lora_fields": ctypes.c_int}  # 0, or 1: a head size it was not compiled for (nothing written)


def _cpu_signature() -> str:
    """What -march=native depends on: a library built on one CPU must not be loaded on another."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = platform.processor()
    return f"{platform.machine()} {flags}"


def library_path(compiler: str, defines: tuple[str, ...] = ()) -> Path:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    texts = [source.read_text() for source in SOURCES + HEADERS]
    key = hashlib.sha256("\n".join([*texts, *COMPILE_FLAGS, *defines, *LINK_FLAGS, *version, _cpu_signature()]).encode())
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "miniyaie" / "kernels")
    return root / f"cpu_kernels-{key.hexdigest()[:16]}.so"


@functools.cache
def load() -> ctypes.CDLL | None:
    """The kernel library, built on first use; None (and one logged reason) when it cannot be."""
    return build()


def build(defines: tuple[str, ...] = ()) -> ctypes.CDLL | None:
    """Build (or find in the cache) and load the library; `defines` are extra -D flags, e.g.
    ("-DMINIYAIE_VECTOR_FLOATS=8",) for another vector width than the machine's (cpu_vector.h)."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        log.warning("no C++ compiler found: the cpu backend uses torch ops for attention and the element-wise layers")
        return None
    torch.get_num_threads()  # torch (and its OpenMP runtime, which the library shares) is loaded
    path = library_path(compiler, defines)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:  # built aside, then renamed: never half a file
            built, objects = Path(tmp) / path.name, [Path(tmp) / f"{source.stem}.o" for source in SOURCES]
            compiles = [subprocess.Popen([compiler, *COMPILE_FLAGS, *defines, str(source), "-o", str(obj)], stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True)
                        for source, obj in zip(SOURCES, objects)]  # side by side: one per core, not one after another
            errors = [compile_.communicate()[1] for compile_ in compiles]  # waits for each
            failed = [error for compile_, error in zip(compiles, errors) if compile_.returncode != 0]
            if not failed:
                result = subprocess.run([compiler, *LINK_FLAGS, *map(str, objects), "-o", str(built)], capture_output=True, text=True)
                failed = [result.stderr] if result.returncode != 0 else []
            if failed:
                log.warning("building the CPU kernels failed, the backend uses torch ops instead:\n%s", failed[0][-2000:])
                return None
            os.replace(built, path)
    library = ctypes.CDLL(str(path))
    for name, argtypes in SIGNATURES.items():
        function = getattr(library, name)
        function.restype, function.argtypes = RESTYPES.get(name), argtypes
    return library


def paged_decode_attention(
    library: ctypes.CDLL, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    rows: torch.Tensor, seq_lens: torch.Tensor, group_starts: torch.Tensor, block_size: int, scale: float,
    out: torch.Tensor,
) -> None:
    """Fill out[rows] with each sequence's one-query attention over its cached keys (q and out float32, the
    cache float32 or bfloat16 (CACHE_TYPES), all contiguous).
    Sequences group_starts[i] .. group_starts[i+1]-1 are attended together, block by block, so that
    the blocks they share are read from memory once (int64, from 0 to rows.numel())."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    library.paged_decode_attention(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), block_tables.data_ptr(), block_tables.shape[1],
        rows.data_ptr(), seq_lens.data_ptr(), rows.numel(), group_starts.data_ptr(), group_starts.numel() - 1,
        num_heads, k_cache.shape[1], head_dim, block_size, scale, out.data_ptr(), torch.get_num_threads(),
        CACHE_TYPES[k_cache.dtype],
    )


def paged_chunk_attention(
    library: ctypes.CDLL, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    first_rows: torch.Tensor, query_lens: torch.Tensor, seq_lens: torch.Tensor, block_size: int, scale: float,
    out: torch.Tensor,
) -> bool:
    """Fill the rows of each chunk in `out` with its causal attention over its cached keys; False if the
    kernel does not take this head size (64 and 128 only), and nothing was written."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    return library.paged_chunk_attention(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), block_tables.data_ptr(), block_tables.shape[1],
        first_rows.data_ptr(), query_lens.data_ptr(), seq_lens.data_ptr(), first_rows.numel(), num_heads,
        k_cache.shape[1], head_dim, block_size, scale, out.data_ptr(), torch.get_num_threads(), CACHE_TYPES[k_cache.dtype],
    ) == 0
