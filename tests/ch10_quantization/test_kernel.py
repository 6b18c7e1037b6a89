"""Task 10.3: the quantized linear kernel against the float32 product with the dequantized weights.

Without a GPU the kernel runs in Triton's interpreter (tests/conftest.py chose it), on small shapes. The
oracle is x @ W.dequantize()^T in float64: the kernel may add in any order, but only float32's rounding may
separate it from the oracle. Known wrong answers are recognised and named.
"""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.quant import QuantizedWeight, pack_nibbles
from miniyaie.quant.kernel import quant_matmul

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
# float32 summation of K products, relative to sum |x| |w| (the scale of the rounding); on a GPU tl.dot
# multiplies float32 in TF32 (10-bit mantissa)
RELATIVE = 2e-3 if ON_GPU else 2e-6


def random_weight(bits: int, n: int, k: int, group: int, seed: int, mins_scale: float = 4.0,
                  positive: bool = False) -> QuantizedWeight:
    g = torch.Generator().manual_seed(seed)
    scales = (torch.rand(n, k // group, generator=g) + 0.05).half()
    if bits == 8:
        codes = torch.randint(0 if positive else -127, 128, (n, k), generator=g, dtype=torch.int8)
        return QuantizedWeight(codes, scales, None, 8, group, (n, k))
    q = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    mins = ((torch.rand(n, k // group, generator=g) - 0.5) * mins_scale).half()
    return QuantizedWeight(pack_nibbles(q, group), scales, mins, 4, group, (n, k))


def name_the_mistake(got: torch.Tensor, x: torch.Tensor, w: QuantizedWeight, error: float) -> str:
    """What a wrong kernel did, when it is a mistake we know."""
    x64 = x.double()
    if w.bits == 4:
        n, k = w.shape
        half = w.codes.view(n, k // w.group, w.group // 2)
        swapped = torch.cat([half >> 4, half & 15], -1).view(n, k).double()
        d, m = (t.double().repeat_interleave(w.group, 1) for t in (w.scales, w.mins))
        codes = torch.cat([half & 15, half >> 4], -1).view(n, k).double()
        if torch.allclose(got.double(), x64 @ (swapped * d + m).T, rtol=1e-4, atol=1e-3):
            return "the nibbles are read the wrong way round: a byte's LOW nibble is the block's first half"
        if torch.allclose(got.double(), x64 @ (codes * d).T, rtol=1e-4, atol=1e-3):
            return "the minimum is missing: each block adds m times the sum of its x"
        if torch.allclose(got.double(), x64 @ ((codes + m) * d).T, rtol=1e-4, atol=1e-3):
            return "the minimum was scaled by d: it is a weight already, added as m * sum(x)"
    scale = x64.abs() @ w.dequantize().double().abs().T + 1e-30
    seen = {what: float(((got.double() - result).abs() / scale).max()) for what, result in narrow_results(x64, w)}
    closest = min(seen, key=seen.get)
    if seen[closest] <= error / 8:  # much nearer to that than to the float32 product
        return f"the result is {closest} (a type narrower than float32): keep them in float32"
    if error < 5e-2:
        return ("the result has the precision of a type narrower than float32 somewhere: the running sum, the "
                "decoded weights and their products must all stay float32")
    return "not x @ W.dequantize()^T"


def narrow_results(x64: torch.Tensor, w: QuantizedWeight) -> list[tuple[str, torch.Tensor]]:
    """x @ W^T with one thing rounded to a narrower type: the running sum after every block (to nearest, and
    truncated as Triton's interpreter converts to bfloat16), or the decoded weights before the products."""
    n, k = w.shape
    decoded = w.dequantize().double()
    shares = torch.einsum("mgj,ngj->gmn", x64.view(-1, k // w.group, w.group), decoded.view(n, -1, w.group))
    nearest = truncated = half = torch.zeros(shares.shape[1:], dtype=torch.float64)
    for share in shares:
        nearest = (nearest + share).float().bfloat16().double()
        truncated = ((truncated + share).float().view(torch.int32) & -65536).view(torch.float32).double()
        half = (half + share).float().half().double()
    return [("the running sum rounded to bfloat16 after every block", nearest),
            ("the running sum rounded to bfloat16 after every block", truncated),
            ("the running sum rounded to float16 after every block", half),
            ("x times the decoded weights rounded to float16", x64 @ decoded.half().double().T),
            ("x times the decoded weights rounded to bfloat16", x64 @ decoded.bfloat16().double().T)]


def check(x: torch.Tensor, w: QuantizedWeight) -> None:
    want = x.double() @ w.dequantize().double().T
    got = quant_matmul(x.to(DEVICE), move(w)).cpu()
    assert got.shape == want.shape and got.dtype == x.dtype, f"want {x.dtype} {list(want.shape)}, got {got.dtype} {list(got.shape)}"
    scale = x.double().abs() @ w.dequantize().double().abs().T + 1e-30
    error = float(((got.double() - want).abs() / scale).max())
    assert error <= RELATIVE, (f"{w.bits}-bit, groups of {w.group}, x {list(x.shape)}: relative error {error:.2e} "
                               f"(float32 allows {RELATIVE:.0e}): {name_the_mistake(got, x, w, error)}")


def move(w: QuantizedWeight) -> QuantizedWeight:
    return QuantizedWeight(*(None if t is None else t.to(DEVICE) for t in (w.codes, w.scales, w.mins)), w.bits, w.group, w.shape)


@pytest.mark.task("10.3")
@settings(max_examples=12)
@given(bits=st.sampled_from([4, 8]), rows=st.sampled_from([1, 2, 5, 16, 17]), out=st.sampled_from([1, 7, 32, 40]),
       groups=st.integers(1, 3), group=st.sampled_from([32, 64]), seed=st.integers(0, 2**16))
@example(bits=4, rows=1, out=32, groups=2, group=32, seed=0).via("a decode row, two Q4_1 blocks")
@example(bits=8, rows=17, out=40, groups=1, group=64, seed=1).via("tiles cut through rows and features")
@example(bits=4, rows=3, out=7, groups=1, group=64, seed=2).via("groups of 64")
def test_the_kernel_is_the_product_with_the_dequantized_weights(bits, rows, out, groups, group, seed):
    w = random_weight(bits, out, groups * group, group, seed)
    x = torch.randn(rows, groups * group, generator=torch.Generator().manual_seed(seed + 1))
    check(x, w)


@pytest.mark.task("10.3")
@pytest.mark.parametrize("bits", [4, 8])
def test_a_long_row_keeps_float32s_precision(bits):
    """2,048 inputs and weights that are all positive, so that nothing cancels: a running sum kept in bfloat16 loses
    about 1e-2 of it (more than a GPU's TF32 products), weights decoded to float16 about 1e-4, float32 about 1e-6."""
    w = random_weight(bits, 32, 2048, 32, seed=3, mins_scale=0.5, positive=True)
    x = torch.rand(2, 2048, generator=torch.Generator().manual_seed(4)) + 0.5  # all positive: sums grow, nothing cancels
    check(x, w)


@pytest.mark.task("10.3")
def test_per_channel_int8_and_leading_axes():
    """int8 with one scale per row (a group of 96: the launcher splits it into blocks of 32 with repeated scales),
    and x with leading axes."""
    g = torch.Generator().manual_seed(5)
    w = QuantizedWeight(torch.randint(-127, 128, (9, 96), generator=g, dtype=torch.int8),
                        (torch.rand(9, 1, generator=g) + 0.1).half(), None, 8, 96, (9, 96))
    check(torch.randn(2, 3, 96, generator=g).view(6, 96), w)
    assert quant_matmul(torch.randn(2, 3, 96).to(DEVICE), move(w)).shape == (2, 3, 9)
