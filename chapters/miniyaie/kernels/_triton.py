"""Importing Triton the same way everywhere: without a GPU its kernels run in the interpreter.

TRITON_INTERPRET must be set before `import triton`, so every kernel module
imports triton through this one.
"""

from __future__ import annotations

import os
import sys

import torch

if not torch.cuda.is_available():
    if "triton" in sys.modules and "TRITON_INTERPRET" not in os.environ:
        # triton's own library functions were compiled for a GPU when it was
        # imported (transformers imports it while building a model).
        raise ImportError(
            "no GPU: Triton kernels need TRITON_INTERPRET=1, set before anything imports triton "
            "(export it, or call miniyaie.backends.choose.prepare_backend before loading the model)"
        )
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["triton", "tl", "interpreting", "dot_dtype"]


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (slow, but exact enough to test)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def dot_dtype(dtype: torch.dtype):
    """The dtype `tl.dot` multiplies in: the input's on a GPU (tensor cores), float32 in the interpreter.

    The interpreter computes bf16 arithmetic wrongly, so there every loaded
    value is widened to float32 first (book, chapter 4: the interpreter).
    """
    if interpreting() or dtype == torch.float32:
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[dtype]
