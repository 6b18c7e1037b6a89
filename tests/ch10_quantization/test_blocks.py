"""Task 10.1: the 4-bit layout and what a block's numbers mean.

Oracles: the layout written out with plain Python loops, and the gguf package's own dequantization of
Q4_1 and Q8_0 blocks (the float32 model transformers loads from a GGUF file holds exactly those weights).
Wrong answers a learner is likely to write are recognised and named.
"""

import gguf
import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.quant import QuantizedWeight, from_gguf_blocks, pack_nibbles, unpack_nibbles


def layout(q: list[int], group: int) -> list[int]:
    """pack_nibbles written out: byte j of a group = code j | code j + group / 2 << 4."""
    out = []
    for start in range(0, len(q), group):
        block = q[start : start + group]
        out += [block[j] | block[j + group // 2] << 4 for j in range(group // 2)]
    return out


def interleaved(q: list[int]) -> list[int]:
    return [q[i] | q[i + 1] << 4 for i in range(0, len(q), 2)]


def name_the_layout(got: list[int], q: list[int], group: int) -> str:
    """What a wrong packing did, when it is a mistake we know."""
    if got == [(b >> 4) | (b & 15) << 4 for b in layout(q, group)]:
        return "the nibbles are swapped: code j belongs in the LOW nibble (bits 0-3), code j + group/2 in the high one"
    if got == interleaved(q):
        return ("neighbouring codes were paired (code 2j with 2j + 1): GGUF's layout pairs code j with code "
                "j + group/2 of the same group")
    if got == layout(q, len(q)):
        return "the codes were paired across the whole row: the pairing restarts in every group"
    return "the bytes are not in pack_nibbles's layout"


codes_and_group = st.sampled_from([2, 4, 32, 64]).flatmap(
    lambda group: st.tuples(st.integers(1, 3).flatmap(lambda blocks: st.lists(st.integers(0, 15), min_size=blocks * group,
                                                                              max_size=blocks * group)), st.just(group)))


@pytest.mark.task("10.1")
@given(case=codes_and_group)
@example(case=([1, 2, 3, 4], 4)).via("the docstring's example: [49, 66]")
@example(case=(list(range(16)) * 2 + list(range(15, -1, -1)) * 2, 32)).via("two groups of 32")
@example(case=([15, 0] * 32, 64)).via("one group of 64")
def test_pack_nibbles_puts_a_groups_first_half_in_the_low_nibbles(case):
    q, group = case
    got = pack_nibbles(torch.tensor(q, dtype=torch.uint8), group)
    assert got.dtype == torch.uint8 and got.shape == (len(q) // 2,), f"want uint8 [{len(q) // 2}], got {got.dtype} {list(got.shape)}"
    assert got.tolist() == layout(q, group), name_the_layout(got.tolist(), q, group)
    rows = torch.tensor([[q, q[::-1]]] * 3, dtype=torch.uint8)  # leading axes (here 3 x 2) are rows: each packed alone
    assert pack_nibbles(rows, group).tolist() == [[layout(q, group), layout(q[::-1], group)]] * 3, (
        "each row is packed alone, whatever the leading axes")


@pytest.mark.task("10.1")
@given(case=codes_and_group, rows=st.integers(1, 3))
@example(case=([1, 2, 3, 4], 4), rows=1).via("the docstring's example")
def test_unpack_nibbles_reads_the_layout_back(case, rows):
    q, group = case
    packed = torch.tensor([layout(q, group)] * rows, dtype=torch.uint8)
    got = unpack_nibbles(packed, group)
    assert got.dtype == torch.uint8 and got.shape == (rows, len(q)), f"want uint8 {[rows, len(q)]}, got {got.dtype} {list(got.shape)}"
    if got[0].tolist() != q:
        wrong = "the nibbles were read the wrong way round" if got[0].tolist() == [
            *(v for start in range(0, len(q), group) for v in q[start + group // 2 : start + group] + q[start : start + group // 2])] else (
            "the halves were interleaved byte by byte: the low nibbles of a group are its FIRST half of codes, in order")
        assert got[0].tolist() == q, wrong
    assert torch.equal(unpack_nibbles(pack_nibbles(got, group), group), got), "unpack(pack(q)) must be q"
    stacked = unpack_nibbles(packed.expand(2, *packed.shape), group)  # any leading axes
    assert stacked.shape == (2, rows, len(q)) and stacked[1, 0].tolist() == q, "leading axes stay as they are"


@pytest.mark.task("10.1")
def test_pack_and_unpack_refuse_what_cannot_be_grouped():
    with pytest.raises(ValueError):
        pack_nibbles(torch.zeros(6, dtype=torch.uint8), 4)  # 6 codes, groups of 4
    with pytest.raises(ValueError):
        pack_nibbles(torch.zeros(6, dtype=torch.uint8), 3)  # an odd group has no halves
    with pytest.raises(ValueError):
        pack_nibbles(torch.tensor([3, 16], dtype=torch.uint8), 2)  # 16 does not fit in 4 bits
    with pytest.raises(ValueError):
        unpack_nibbles(torch.zeros(3, dtype=torch.uint8), 4)  # 3 bytes hold 6 codes: not groups of 4
    with pytest.raises(ValueError):
        unpack_nibbles(torch.zeros(3, dtype=torch.uint8), 3)


def name_the_decoding(got: torch.Tensor, w: QuantizedWeight) -> str:
    """What a wrong dequantization did, when it is a mistake we know."""
    n, k, g = *w.shape, w.group
    d = w.scales.float().repeat_interleave(g, 1)
    if w.bits == 4:
        m = w.mins.float().repeat_interleave(g, 1)
        half = w.codes.view(n, k // g, g // 2)
        swapped = torch.cat([half >> 4, half & 15], -1).view(n, k).float()
        if torch.allclose(got, swapped * d + m):
            return "the nibbles are read the wrong way round: the low nibble holds the group's first half"
        codes = torch.cat([half & 15, half >> 4], -1).view(n, k).float()
        if torch.allclose(got, codes * d + w.mins.float()[0, 0]) or torch.allclose(got, codes * d + w.mins.float().mean()):
            return "one minimum was applied to the whole tensor: every block has its own minimum"
        if torch.allclose(got, (codes + m) * d):
            return "the minimum was scaled by d: w = d * q + m, m is already a weight, not a code"
        if torch.allclose(got, codes * w.scales.float()[:, :1] + m):
            return "one scale per row: every block of `group` weights has its own scale"
    if torch.allclose(got, (w.codes.float() if w.bits == 8 else got) * w.scales.float()[:, :1].expand(n, k)):
        return "one scale per row: every block of `group` weights has its own scale"
    return "these are not the blocks' weights"


@pytest.mark.task("10.1")
@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
@given(rows=st.integers(1, 5), blocks=st.integers(1, 4), spread=st.sampled_from([1e-3, 1.0, 300.0]), seed=st.integers(0, 2**16))
@example(rows=3, blocks=2, spread=1.0, seed=0).via("several blocks a row")
def test_dequantize_is_the_gguf_packages_dequantization_bit_for_bit(kind, rows, blocks, spread, seed):
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    values = np.random.default_rng(seed).standard_normal((rows, blocks * 32)).astype(np.float32) * spread
    values += np.random.default_rng(seed + 1).standard_normal((rows, blocks, 1)).astype(np.float32).repeat(32, 2).reshape(
        rows, -1) * spread * 3  # every block sits elsewhere: one minimum or one scale for all cannot fit
    raw = gguf.quants.quantize(values, qtype)
    weight = from_gguf_blocks(kind, raw, (rows, blocks * 32))
    want = torch.from_numpy(gguf.quants.dequantize(raw, qtype).reshape(rows, -1))
    got = weight.dequantize()
    assert got.dtype == torch.float32 and got.shape == want.shape, f"want float32 {list(want.shape)}, got {got.dtype} {list(got.shape)}"
    assert torch.equal(got, want), (
        f"{kind}: {name_the_decoding(got, weight)} (largest difference {float((got - want).abs().max()):.3g}; "
        + ("compute d * q + m in float32, d and m widened from float16)" if kind == "Q4_1" else
           "compute d * q in float32, d widened from float16; Q8_0 has no minimum)"))


@pytest.mark.task("10.1")
@given(bits=st.sampled_from([4, 8]), group=st.sampled_from([32, 64, 96, 128]), rows=st.integers(1, 6),
       blocks=st.integers(1, 3), seed=st.integers(0, 2**16), pick=st.lists(st.integers(0, 5), min_size=1, max_size=5))
@example(bits=8, group=96, rows=2, blocks=1, seed=0, pick=[1, 0, 1]).via("8-bit, one block a row (per output channel)")
def test_dequantize_decodes_any_group_and_only_the_rows_asked_for(bits, group, rows, blocks, seed, pick):
    if bits == 4 and group == 96:
        group = 32  # 4-bit groups are the kernels' powers of two
    g = torch.Generator().manual_seed(seed)
    k = blocks * group
    q = torch.randint(0, 16, (rows, k), generator=g, dtype=torch.uint8) if bits == 4 else torch.randint(
        -127, 128, (rows, k), generator=g, dtype=torch.int8)
    scales = (torch.rand(rows, blocks, generator=g) + 0.01).half()
    mins = (torch.randn(rows, blocks, generator=g) * 4).half() if bits == 4 else None
    codes = torch.tensor([layout(r, group) for r in q.tolist()], dtype=torch.uint8) if bits == 4 else q
    weight = QuantizedWeight(codes.view(rows, -1), scales, mins, bits, group, (rows, k))
    want = q.float() * scales.float().repeat_interleave(group, 1)
    if bits == 4:
        want = want + mins.float().repeat_interleave(group, 1)
    got = weight.dequantize()
    assert torch.equal(got, want), f"{bits}-bit, groups of {group}: {name_the_decoding(got, weight)}"
    pick = [p % rows for p in pick]
    got = weight.dequantize(torch.tensor(pick))
    assert torch.equal(got, want[pick]), f"dequantize(rows={pick}) must be the weights of those rows, in that order"
