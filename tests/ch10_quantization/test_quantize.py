"""Task 10.2: choosing each block's step (and minimum), checked against what the stored float16 numbers decode to.

Every weight must be within half a step of its decoded value, and no step may be wider than the block needs
(a step wide enough for anything would pass the first check alone). The stored scale and minimum are the
float16s the dequantization reads, so a code computed from the float32 step before rounding can miss.
"""

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.quant import quantize_int4, quantize_int8

SCHEMES = ["int8", "int8-g32", "int4", "int4-sym"]
ULP = 2.0**-10  # float16's relative spacing: a step rounded up is at most this much wider (plus the smallest subnormal)


def quantize(scheme: str, w: torch.Tensor, group: int):
    if scheme == "int8":
        return quantize_int8(w)
    if scheme == "int8-g32":
        return quantize_int8(w, group)
    return quantize_int4(w, group, symmetric=scheme == "int4-sym")


def weights(rows: int, groups: int, group: int, spread: float, seed: int, shape: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, groups * group, generator=g) * spread
    if shape == "offset":  # blocks far from zero, each elsewhere: a minimum per block matters
        w += (torch.randn(rows, groups, 1, generator=g) * 4 * spread).expand(rows, groups, group).reshape(rows, -1)
    elif shape == "outlier":  # one huge weight: only its own block should pay for it
        w[0, 0] = 20 * spread
    elif shape == "constant":
        w = torch.full_like(w, spread)
    elif shape == "zeros":
        w = torch.zeros_like(w)
    elif shape == "subnormal":  # steps among float16's subnormals, where rounding to nearest can lose a third
        w = (torch.linspace(-1, 1, groups * group) * 2.45 * 7 * 2.0**-24).expand(rows, -1).clone()
    return w


def tricky_for_float16() -> torch.Tensor:
    """A block whose float32 step (1 + 0.45 * 2^-10) rounds DOWN to the float16 1.0: a code computed with the
    float32 step and decoded with the stored one misses its weight by more than half a step."""
    step = 1 + 0.45 * 2.0**-10
    block = torch.tensor([0.0, 15 * step, 14.4995 * step, 7.4995 * step, 127 * step / 8.47] + [3.0] * 27)
    return torch.stack([block, -block])


def exact_steps(scheme: str) -> torch.Tensor:
    """Rows whose step (and minimum) are float16 numbers already: rounding them up (or down) changes nothing."""
    g = torch.Generator().manual_seed(5)
    if scheme.startswith("int8"):  # max |w| = 127 / 64: the step 1 / 64
        w = torch.randint(-127, 128, (2, 64), generator=g).float() / 64
        w[:, 0], w[:, 32] = 127 / 64, -127 / 64
    elif scheme == "int4-sym":  # max |w| = 7 / 8: the step 1 / 8
        w = torch.randint(-7, 8, (2, 64), generator=g).float() / 8
        w[:, 0], w[:, 32] = -7 / 8, 7 / 8
    else:  # from -1 to -1 + 15 / 16: the minimum -1, the step 1 / 16
        w = torch.randint(0, 16, (2, 64), generator=g).float() / 16 - 1
        w[:, 0], w[:, 1], w[:, 32], w[:, 33] = -1, -1 + 15 / 16, -1, -1 + 15 / 16
    return w


blocks_of = dict(rows=st.integers(1, 4), groups=st.integers(1, 3), group=st.sampled_from([32, 64, 128]),
                 spread=st.sampled_from([1e-4, 0.02, 1.0, 300.0]), seed=st.integers(0, 2**16),
                 shape=st.sampled_from(["normal", "offset", "outlier", "constant", "zeros"]))


def check_within_half_a_step(scheme: str, w: torch.Tensor, q, group: int) -> None:
    n, k = w.shape
    g = k if scheme == "int8" else group
    d = q.scales.float().repeat_interleave(g, 1)
    error = (q.dequantize() - w).abs()
    allowed = d / 2 + 4e-7 * w.abs() + 1e-30  # float32's rounding of d * q + m
    if not bool((error <= allowed).all()):
        i, j = np.unravel_index(int(torch.argmax(error - allowed)), error.shape)
        reach = grid_reach(scheme, q, g)
        low, high = float(reach[0][i, j]), float(reach[1][i, j])
        if d[i, j] == 0:
            raise AssertionError(
                f"{scheme}: weight [{i}, {j}] = {float(w[i, j])!r} has a step of 0 but decodes to "
                f"{float(q.dequantize()[i, j])!r}: a step may be 0 only when its block's weights are float16s "
                "already; a block of equal weights needs its minimum rounded down and a small step up to them")
        where = (f"{scheme}: weight [{i}, {j}] = {float(w[i, j])!r} decodes to {float(q.dequantize()[i, j])!r}, "
                 f"{float(error[i, j] / d[i, j]) if d[i, j] else float('inf'):.4f} steps away (at most 0.5)")
        if not low - d[i, j] / 2 <= w[i, j] <= high + d[i, j] / 2:
            raise AssertionError(
                f"{where}: the stored step and minimum decode only from {low!r} to {high!r}, so no code reaches it. "
                "A step rounded to nearest (or down) to a float16, or a minimum rounded up, can fall short of the "
                "block's extreme weights: round the step up and the minimum down")
        raise AssertionError(f"{where}. Were the codes computed with the step before it was stored as float16?")


def grid_reach(scheme: str, q, g: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The smallest and largest values the stored float16 numbers can decode to, per weight."""
    d = q.scales.float().repeat_interleave(g, 1)
    if scheme.startswith("int8"):
        return -127 * d, 127 * d
    m = q.mins.float().repeat_interleave(g, 1)
    return m, m + 15 * d


@pytest.mark.task("10.2")
@pytest.mark.parametrize("scheme", SCHEMES)
@given(**blocks_of)
@example(rows=2, groups=1, group=32, spread=1.0, seed=0, shape="float16").via("a step that float16 rounds down")
@example(rows=3, groups=2, group=32, spread=1.0, seed=1, shape="offset").via("blocks far from zero")
@example(rows=1, groups=1, group=32, spread=1e-4, seed=0, shape="constant").via("a block of equal weights")
@example(rows=1, groups=1, group=32, spread=0.0, seed=0, shape="zeros").via("a block of zeros")
@example(rows=1, groups=1, group=32, spread=1.0, seed=0, shape="subnormal").via("a subnormal step that float16 rounds down")
def test_every_weight_is_within_half_a_step_of_its_decoded_value(scheme, rows, groups, group, spread, seed, shape):
    w = tricky_for_float16() if shape == "float16" else weights(rows, groups, group, spread, seed, shape)
    q = quantize(scheme, w, group)
    check_within_half_a_step(scheme, w, q, group)


@pytest.mark.task("10.2")
@pytest.mark.parametrize("scheme", SCHEMES)
@given(**blocks_of)
@example(rows=1, groups=2, group=32, spread=1.0, seed=0, shape="outlier").via("one outlier: its block alone widens")
@example(rows=2, groups=3, group=32, spread=1.0, seed=2, shape="offset").via("each block its own minimum")
def test_no_step_is_wider_than_its_block_needs(scheme, rows, groups, group, spread, seed, shape):
    w = weights(rows, groups, group, spread, seed, shape)
    q = quantize(scheme, w, group)
    g = w.shape[1] if scheme == "int8" else group
    blocks = w.view(w.shape[0], -1, g)
    d = q.scales.float()
    if scheme.startswith("int8"):
        need = blocks.abs().amax(-1) / 127
    elif scheme == "int4-sym":
        need = blocks.abs().amax(-1) / 7
    else:
        low = blocks.amin(-1)
        m = q.mins.float()
        assert bool((m <= low).all()), "a block's minimum must not be above its smallest weight (round it down)"
        assert bool((m >= low - low.abs() * ULP - 6e-8).all()), (
            f"a block's minimum is {float((low - m).max()):.3g} below its smallest weight: every block has its own "
            "minimum (the smallest weight of that block, rounded down to a float16)")
        need = (blocks.amax(-1) - m) / 15
    assert bool((d <= need * (1 + ULP) + 6e-8).all()), (
        f"{scheme}: a step is {float((d / need.clamp_min(1e-30)).max()):.4f} times what its block needs; round the "
        "step up to the next float16, no further, and take it from the block's own weights")


@pytest.mark.task("10.2")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_step_that_is_a_float16_already_is_kept_exactly(scheme):
    w = exact_steps(scheme)
    q = quantize(scheme, w, 32)
    want = {"int8": 1 / 64, "int8-g32": 1 / 64, "int4-sym": 1 / 8, "int4": 1 / 16}[scheme]
    assert bool((q.scales.float() == want).all()), (
        f"{scheme}: the exact step is {want}, a float16 already, but the stored steps are {q.scales.unique().tolist()}: "
        "a value that is a float16 needs no rounding, up or down")
    if scheme == "int4":
        assert bool((q.mins.float() == -1).all()), f"the minimum -1 is a float16 already; stored {q.mins.unique().tolist()}"
    assert torch.equal(q.dequantize(), w), "every weight here is on its block's grid: it must decode exactly"


@pytest.mark.task("10.2")
@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_blocks_have_the_formats_kernels_read(scheme):
    w = weights(3, 4, 32, 1.0, 0, "offset")
    q = quantize(scheme, w, 32)
    n, k = w.shape
    assert q.shape == (n, k) and q.scales.dtype == torch.float16, "scales are float16, as GGUF's"
    if scheme.startswith("int8"):
        assert q.bits == 8 and q.codes.dtype == torch.int8 and q.codes.shape == (n, k) and q.mins is None
        assert q.group == (k if scheme == "int8" else 32) and q.scales.shape == (n, k // q.group), (
            "int8 with no group: one scale per output channel")
        assert int(q.codes.abs().max()) == 127, "the largest weight of a block takes code 127 or -127"
    else:
        assert q.bits == 4 and q.codes.dtype == torch.uint8 and q.codes.shape == (n, k // 2), "two codes a byte"
        assert q.group == 32 and q.scales.shape == q.mins.shape == (n, k // 32) and q.mins.dtype == torch.float16
        if scheme == "int4-sym":
            assert torch.equal(q.mins.float(), -8 * q.scales.float()), "symmetric: m = -8 d"


@pytest.mark.task("10.2")
def test_weights_that_cannot_be_blocked_are_refused():
    with pytest.raises(ValueError, match="multiple of the group"):
        quantize_int4(torch.randn(4, 48), 32)
    with pytest.raises(ValueError, match="multiple of the group"):
        quantize_int8(torch.randn(4, 48), 32)
    with pytest.raises(ValueError):
        quantize_int8(torch.tensor([[1.0, float("nan")]]))
