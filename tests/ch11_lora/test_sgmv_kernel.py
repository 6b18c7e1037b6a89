"""Task 11.4: the segmented LoRA kernel equals the row-by-row definition.

Without a GPU the kernel runs in Triton's interpreter (tests/conftest.py chose it), on small shapes:
segments longer than a row tile, widths that are not whole tiles, ranks below the padded rank, rows
without an adapter. On a GPU tl.dot multiplies float32 in TF32, hence the looser tolerance there.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.lora import add_lora_reference, group_rows
from miniyaie.lora.kernel import sgmv

ON_GPU = torch.cuda.is_available()
DEVICE = "cuda" if ON_GPU else "cpu"
TOLERANCE = 2e-2 if ON_GPU else 1e-4


def kernel_case(rows, fan_in, fan_out, ranks, max_rank, slot_of_row, seed):
    g = torch.Generator().manual_seed(seed)
    num_slots = len(ranks)
    a, b = torch.zeros(num_slots, max_rank, fan_in), torch.zeros(num_slots, fan_out, max_rank)
    for s, r in enumerate(ranks):
        a[s, :r] = torch.randn(r, fan_in, generator=g) / fan_in**0.5
        b[s, :, :r] = torch.randn(fan_out, r, generator=g)
    x, y = torch.randn(rows, fan_in, generator=g), torch.randn(rows, fan_out, generator=g)
    return x, y, a, b, torch.rand(num_slots, generator=g) + 0.5, torch.tensor(slot_of_row, dtype=torch.long)


def check(rows, fan_in, fan_out, ranks, max_rank, slot_of_row, seed=0):
    x, y, a, b, scaling, slots = kernel_case(rows, fan_in, fan_out, ranks, max_rank, slot_of_row, seed)
    want = add_lora_reference(y.double().clone(), x.double(), slots, a.double(), b.double(), scaling.double())
    on = lambda t: t.to(DEVICE)  # noqa: E731
    y_dev = on(y.clone())
    segments = group_rows(on(slots))
    sgmv(y_dev, on(x), segments, on(a), on(b), on(scaling))
    got = y_dev.cpu().double()
    none = slots < 0
    assert torch.equal(got[none], y.double()[none]), "rows without an adapter (slot -1) were changed"
    error = ((got - want).abs() / (1 + want.abs())).max().item()
    assert error < TOLERANCE, f"not the row-by-row definition: relative error {error:.3g} (rows {slot_of_row}, ranks {ranks})"


@pytest.mark.task("11.4")
@settings(max_examples=20)
@given(rows=st.integers(1, 20), fan_in=st.integers(1, 40), fan_out=st.integers(1, 40),
       ranks=st.lists(st.integers(1, 6), min_size=1, max_size=3), seed=st.integers(0, 3), data=st.data())
@example(rows=1, fan_in=8, fan_out=8, ranks=[4], seed=0, data=None)  # one row
@example(rows=20, fan_in=40, fan_out=40, ranks=[6, 2], seed=1, data=None)  # a segment over two row tiles, widths past a tile
@example(rows=6, fan_in=8, fan_out=8, ranks=[1, 3], seed=2, data=None)  # no adapter at all
@example(rows=5, fan_in=16, fan_out=16, ranks=[16, 16], seed=3, data=None)  # square, rank a whole padded tile
@example(rows=7, fan_in=12, fan_out=10, ranks=[2, 5, 3], seed=1, data=None)  # slots out of order, slot 0 unused
def test_the_kernel_is_the_row_by_row_definition(rows, fan_in, fan_out, ranks, seed, data):
    max_rank = max(ranks)
    if data is None:  # the explicit examples' slot mixes
        mixes = {1: [0], 20: [i % 2 if i % 5 else -1 for i in range(20)], 6: [-1] * 6, 5: [1, 0, -1, 1, 0],
                 7: [2, -1, 2, 1, 2, -1, 1]}
        slot_of_row = mixes[rows]
    else:
        slot_of_row = data.draw(st.lists(st.integers(-1, len(ranks) - 1), min_size=rows, max_size=rows))
    check(rows, fan_in, fan_out, ranks, max_rank, slot_of_row, seed)


@pytest.mark.task("11.4")
@pytest.mark.parametrize("fan_in, fan_out, rank", [(8, 8, 3), (40, 24, 5)])
def test_the_kernel_reads_and_writes_only_its_own_elements(fan_in, fan_out, rank):
    """x, A and B are views into larger tensors (as LoRASlots' stacks are) whose other elements are NaN, and y a
    view beside guard columns: whatever the kernel reads outside its operands poisons the result."""
    rows, slots = 7, [1, -1, 0, 1, 1, -1, 0]
    x, y, a, b, scaling, slot_of_row = kernel_case(rows, fan_in, fan_out, [rank, rank], rank, slots, seed=5)
    nan = float("nan")
    big_x = torch.full((rows, fan_in + 3), nan)
    big_x[:, :fan_in] = x
    big_a = torch.full((3, rank + 2, fan_in + 3), nan)  # one more slot, more ranks and features, all NaN
    big_a[:2, :rank, :fan_in] = a
    big_b = torch.full((3, fan_out + 2, rank + 2), nan)
    big_b[:2, :fan_out, :rank] = b
    big_x[torch.tensor(slots) < 0] = nan  # rows without an adapter may hold anything, even NaN
    big_y = torch.full((rows, fan_out + 2), 7.0)  # guard columns
    big_y[:, :fan_out] = y
    on = lambda t: t.to(DEVICE)  # noqa: E731
    big_y_dev = on(big_y)
    x_view, a_view, b_view = on(big_x)[:, :fan_in], on(big_a)[:2, :rank, :fan_in], on(big_b)[:2, :fan_out, :rank]
    sgmv(big_y_dev[:, :fan_out], x_view, group_rows(on(slot_of_row)), a_view, b_view, on(scaling))
    got = big_y_dev.cpu()
    assert torch.equal(got[:, fan_out:], big_y[:, fan_out:]), "the kernel wrote outside y's columns"
    live = slot_of_row >= 0
    want = add_lora_reference(y.double().clone(), x.double(), slot_of_row, a.double(), b.double(), scaling.double())
    assert torch.isfinite(got[live]).all(), \
        "NaN in rows with an adapter: the kernel read outside x, A or B (past K, RANK or N, or another row)"
    assert torch.allclose(got[live, :fan_out].double(), want[live], rtol=TOLERANCE, atol=TOLERANCE), \
        "not the row-by-row definition with x, A and B given as views"
    assert torch.equal(got[~live, :fan_out], y[~live]), "rows without an adapter (slot -1) were changed"


def _by_segment_index(slots, segments):
    """The slot each row would get if segment j's index were taken for its slot (a known mistake)."""
    wrong = slots.clone()
    for j, (start, length) in enumerate(zip(segments.starts.tolist(), segments.lengths.tolist())):
        wrong[segments.order[start : start + length]] = j
    return wrong


@pytest.mark.task("11.4")
@pytest.mark.parametrize("layout", ["contiguous", "A and B transposed in memory"])
def test_each_segment_uses_its_own_slots_weights_and_scaling(layout):
    """Segment j's slot is slots[j], not j: here the segments' slots are 1 and 2 (slot 0 unused), each slot with
    its own rank and scaling. A and B may be views of any strides (the kernel gets all three of each)."""
    slot_of_row = [2, -1, 2, 1, 2]
    x, y, a, b, _, slots = kernel_case(5, 12, 10, [3, 2, 4], 4, slot_of_row, seed=4)
    scaling = torch.tensor([0.25, 2.0, 3.5])
    if layout != "contiguous":  # the same values, stored [slots, in, rank] and [slots, rank, out]: no unit stride
        a, b = a.transpose(1, 2).contiguous().transpose(1, 2), b.transpose(1, 2).contiguous().transpose(1, 2)
        assert a.stride(2) != 1 and b.stride(2) != 1
    segments = group_rows(slots)
    on = lambda t: t.to(DEVICE)  # noqa: E731
    y_dev = on(y.clone())
    sgmv(y_dev, on(x), group_rows(on(slots)), on(a), on(b), on(scaling))
    got = y_dev.cpu().double()
    definition = lambda s, sc: add_lora_reference(y.double().clone(), x.double(), s, a.double(), b.double(),  # noqa: E731
                                                  sc.double())
    close = lambda want: torch.allclose(got, want, rtol=TOLERANCE, atol=TOLERANCE)  # noqa: E731
    if close(definition(slots, scaling)):
        return
    by_index = _by_segment_index(slots, segments)
    scaling_by_index = scaling.clone()
    for j, s in enumerate(segments.slots.tolist()):
        scaling_by_index[s] = scaling[j]
    slot_by_index, scaling_by_segment = close(definition(by_index, scaling)), close(definition(slots, scaling_by_index))
    assert not slot_by_index, \
        "segment j used slot j: its slot is slots[j] (segments are not slots 0..n-1 in order; some slots are unused)"
    assert not scaling_by_segment, "the scaling was read at the segment index j: it is scaling[slots[j]], the slot's own"
    if layout != "contiguous":
        raise AssertionError("wrong with A and B given as views whose input or output axis is not unit stride: "
                             "address A[s][r, k] and B[s][n, r] with all three of their strides")
    raise AssertionError(f"not the row-by-row definition for rows of slots {slot_of_row} with scalings {scaling.tolist()}")
