"""Chapter 10's challenge: the most accurate Q4_1 blocks for real weights, at Q4_1's fixed 5 bits a weight.

Your lever: a `quantize(weight) -> QuantizedWeight` of your own design in your tree's
`miniyaie/quant/challenge.py` (without one, your Task 10.2's `quantize_int4(weight, 32)`). The format
is fixed (4-bit codes, blocks of 32, one float16 step and minimum each: 20 bytes a block), so accuracy
cannot be bought with bytes; which step, minimum and codes a block stores is yours. A block's min/max
is one choice, not the best one: a few outliers stretch the step every other weight pays for.
Score: the tied head's logits on fixed hidden states, their mean squared error relative to the mean
square of the exact logits, in parts per ten thousand; deterministic (no timing). The reference's entry is its
own `quantize`, in solutions/miniyaie/quant/challenge.py (the reference column runs it).
"""

from __future__ import annotations

ROWS_EVERY, STATES, GROUP = 12, 32, 32  # 4,096 of the vocabulary's 49,152 rows; hidden states per run


def _weights_and_states():
    """The bundled file's token embedding (its one Q8_0 tensor, the tied head's weights), every 12th row."""
    import torch

    from miniyaie.model.loader import bundled_gguf
    from miniyaie.quant.blocks import from_gguf_blocks
    from miniyaie.quant.gguf_loader import read_gguf

    _, tensors = read_gguf(bundled_gguf())
    kind, data, shape = tensors["token_embd.weight"]
    table = from_gguf_blocks(kind, data, shape)
    w = table.dequantize(torch.arange(0, shape[0], ROWS_EVERY)).float()
    x = torch.randn(STATES, shape[1], generator=torch.Generator().manual_seed(0))
    return w, x


def _score(quantize) -> float:
    import torch

    w, x = _weights_and_states()
    q = quantize(w.clone())
    n, k = w.shape
    fixed = (q.bits == 4 and q.group == GROUP and tuple(q.shape) == (n, k) and q.mins is not None
             and q.codes.dtype == torch.uint8 and tuple(q.codes.shape) == (n, k // 2)
             and q.scales.dtype == q.mins.dtype == torch.float16
             and tuple(q.scales.shape) == tuple(q.mins.shape) == (n, k // GROUP))
    if not fixed:
        raise ValueError("quantize must return Q4_1 blocks: bits 4, group 32, codes uint8 [N, K / 2], float16 "
                         "scales and mins [N, K / 32] (the bytes a weight are fixed)")
    exact = (x.double() @ w.double().T)
    got = x.double() @ q.dequantize().double().T
    return float(((got - exact) ** 2).mean() / (exact**2).mean() * 1e4)


def yours() -> float:
    from miniyaie.challenges.base import learner_design
    from miniyaie.quant import quantize_int4

    return _score(learner_design(10, "quantize", lambda w: quantize_int4(w, GROUP)))


def min_max() -> float:
    from miniyaie.quant import quantize_int4

    return _score(lambda w: quantize_int4(w, GROUP))


def _build():
    from miniyaie.challenges.base import Challenge

    return Challenge(
        number=10,
        title="the most accurate Q4_1 blocks for real weights, at a fixed 5 bits a weight",
        metric="logits' mean squared error / their mean square",
        unit="parts per 10,000",
        higher_is_better=False,
        workload=(f"the bundled SmolLM2's token embedding (the tied head), every {ROWS_EVERY}th row (4,096 x 576), "
                  f"quantized to Q4_1 blocks of {GROUP}; the head's logits on {STATES} seeded random hidden states"),
        run=yours,
        baseline=min_max,
        correctness_tests=["tests/ch10_quantization/test_blocks.py", "tests/ch10_quantization/test_quantize.py"],
        note="The format is fixed (checked): 4-bit codes, blocks of 32, a float16 step and minimum each.",
    )


CHALLENGE = _build()
