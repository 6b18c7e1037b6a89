"""The C++ decode-attention kernel for CPUs: built once with the machine's g++, loaded with ctypes.

Why C++ and not torch ops: on a CPU, attention over a paged cache written with
torch ops must first gather each sequence's K/V into one tensor, then read it
again in SDPA; at long contexts that copy is most of the step. A loop that
follows the block table reads every K and V row once, where it lies
(paged_decode_attention.cpp). It is plain C++ with no torch headers, so it
compiles in about a second; the library is cached under
~/.cache/miniyaie/kernels, keyed by the source, the flags and the CPU.

`load()` returns None, and says why once, where no compiler is found or the
build fails: the engine then uses the batched torch backend for every row.
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

SOURCE = Path(__file__).with_name("paged_decode_attention.cpp")
# -ffast-math lets g++ vectorise expf (glibc's libmvec) and reorder the sums. It is given to the
# compile step only: linked with it, the library would switch the whole process's floating
# point to flush-to-zero when it loads (gcc's crtfastmath), and torch's results with it.
COMPILE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-ffast-math", "-fPIC", "-std=c++17", "-c")
LINK_FLAGS = ("-shared", "-fopenmp")
CACHE_ENV = "MINIYAIE_KERNEL_CACHE"  # where built libraries go (default ~/.cache/miniyaie/kernels)
log = logging.getLogger(__name__)

_i64, _f32p, _i64p = ctypes.c_int64, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int64)


def _cpu_signature() -> str:
    """What -march=native depends on: a library built on one CPU must not be loaded on another."""
    try:
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    except (OSError, StopIteration):
        flags = platform.processor()
    return f"{platform.machine()} {flags}"


def library_path(compiler: str) -> Path:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
    key = hashlib.sha256("\n".join([SOURCE.read_text(), *COMPILE_FLAGS, *LINK_FLAGS, *version, _cpu_signature()]).encode())
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "miniyaie" / "kernels")
    return root / f"paged_decode_attention-{key.hexdigest()[:16]}.so"


@functools.cache
def load() -> ctypes.CDLL | None:
    """The kernel library, built on first use; None (and one logged reason) when it cannot be."""
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        log.warning("no C++ compiler found: decode attention uses the torch backend")
        return None
    torch.get_num_threads()  # torch (and its OpenMP runtime, which the library shares) is loaded
    path = library_path(compiler)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:  # built aside, then renamed: never half a file
            built, obj = Path(tmp) / path.name, Path(tmp) / "kernel.o"
            result = subprocess.run([compiler, *COMPILE_FLAGS, str(SOURCE), "-o", str(obj)], capture_output=True, text=True)
            if result.returncode == 0:
                result = subprocess.run([compiler, *LINK_FLAGS, str(obj), "-o", str(built)], capture_output=True, text=True)
            if result.returncode != 0:
                log.warning("building %s failed, decode attention uses the torch backend:\n%s", SOURCE.name,
                            result.stderr[-2000:])
                return None
            os.replace(built, path)
    library = ctypes.CDLL(str(path))
    library.paged_decode_attention.restype = None
    library.paged_decode_attention.argtypes = [
        _f32p, _f32p, _f32p, _i64p, _i64, _i64p, _i64p, _i64, _i64, _i64, _i64, _i64, ctypes.c_float, _f32p, ctypes.c_int,
    ]
    return library


def _ptr(tensor: torch.Tensor, kind):
    return ctypes.cast(tensor.data_ptr(), kind)


def paged_decode_attention(
    library: ctypes.CDLL, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    rows: torch.Tensor, seq_lens: torch.Tensor, block_size: int, scale: float, out: torch.Tensor,
) -> None:
    """Fill out[rows] with each sequence's one-query attention over its cached keys (float32, contiguous)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    library.paged_decode_attention(
        _ptr(q, _f32p), _ptr(k_cache, _f32p), _ptr(v_cache, _f32p), _ptr(block_tables, _i64p), block_tables.shape[1],
        _ptr(rows, _i64p), _ptr(seq_lens, _i64p), rows.numel(), num_heads, k_cache.shape[1], head_dim, block_size,
        scale, _ptr(out, _f32p), torch.get_num_threads(),
    )
