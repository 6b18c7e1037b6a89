"""Chapter 4's challenge: a decode-attention kernel faster than the reference's, in the harness.

Your lever: your `decode_attention` kernel (kernels/decode_attention_kernel.py): tiling, how the
work is split across programs (one per head? split the context?), what stays in registers.
Score: the harness's median time (triton.testing.do_bench) of one decode step at batch 64,
context 8192, page 16, GQA 32:4, head dim 128, bf16. A timing, on a GPU only: without one the
interpreter checks your kernel's correctness at small shapes and no time is reported.
"""

from __future__ import annotations

import math

from miniyaie.challenges.base import Challenge

SHAPE = "batch 64, context 8192, page 16"


def _cases():
    import torch

    from miniyaie.backends.choose import prepare_backend

    on_gpu = torch.cuda.is_available()
    prepare_backend("triton", "cuda" if on_gpu else "cpu")  # the interpreter, before anything imports triton
    import miniyaie.kernels as K
    from miniyaie.bench.kernel_cases import build_cases
    from miniyaie.kernels._triton import interpreting

    on_gpu = on_gpu and not interpreting()
    return on_gpu, build_cases(torch, K, on_gpu, ["decode_attention"])


def _time(which: str) -> float:
    """Median ms of the kernel ('kernel') or of SDPA on K/V already gathered ('sdpa'); NaN without a GPU."""
    on_gpu, cases = _cases()
    if not on_gpu:
        for case in cases:  # correctness at interpreter sizes: raises on a wrong kernel
            case.compare(case.run(), case.reference())
        return math.nan
    from miniyaie.kernels._triton import triton

    (case,) = [c for c in cases if c.shape == SHAPE]
    case.compare(case.run(), case.reference())
    fn = case.run if which == "kernel" else next(b.run for b in case.baselines if b.name == "sdpa")
    return triton.testing.do_bench(fn, return_mode="median")


CHALLENGE = Challenge(
    number=4,
    title="a decode-attention kernel faster than the reference's",
    metric="median time of one decode step",
    unit="ms, GPU",
    higher_is_better=False,
    workload=f"decode attention at {SHAPE}, GQA 32:4, head dim 128, bf16, seeded inputs (the harness's case)",
    run=lambda: _time("kernel"),
    baseline=lambda: _time("sdpa"),
    correctness_tests=["tests/ch04_triton_kernels/test_decode_attention.py", "tests/ch04_triton_kernels/test_attention_edges.py"],
    note=("A timing on a GPU (n/a without one: the CPU interpreter checks correctness only, its speed says nothing "
          "about a GPU's). Baseline: torch's scaled_dot_product_attention on K/V already gathered from the pages."),
)
