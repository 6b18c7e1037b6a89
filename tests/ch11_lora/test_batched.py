"""Task 11.3: the rows of a step grouped by adapter, and the batched multiply equal to its row-by-row definition.

The oracle is the definition in float64, one row at a time: y[i] += scaling[s] * (x[i] @ A[s]^T) @ B[s]^T
for a row of slot s, nothing for a row of slot -1. Known wrong answers are recognised and named.
"""

from __future__ import annotations

import time

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.lora import add_lora, add_lora_reference, group_rows


def case(rows: int, fan_in: int, fan_out: int, num_slots: int, ranks: list[int], max_rank: int, slot_of_row: list[int],
         seed: int = 0):
    """x, y, stacked A/B zero-padded past each slot's rank, scaling, slots of the rows (float32)."""
    g = torch.Generator().manual_seed(seed)
    a = torch.zeros(num_slots, max_rank, fan_in)
    b = torch.zeros(num_slots, fan_out, max_rank)
    for s, r in enumerate(ranks):
        a[s, :r] = torch.randn(r, fan_in, generator=g)
        b[s, :, :r] = torch.randn(fan_out, r, generator=g)
    scaling = torch.rand(num_slots, generator=g) + 0.5
    x, y = torch.randn(rows, fan_in, generator=g), torch.randn(rows, fan_out, generator=g)
    return x, y, a, b, scaling, torch.tensor(slot_of_row, dtype=torch.long)


def expected(x, y, a, b, scaling, slots):
    return add_lora_reference(y.double().clone(), x.double(), slots, a.double(), b.double(), scaling.double())


def name_the_mistake(got, x, y, a, b, scaling, slots) -> str:
    got, want = got.double(), expected(x, y, a, b, scaling, slots)
    close = lambda u, v: u.shape == v.shape and torch.allclose(u, v, rtol=1e-4, atol=1e-4)  # noqa: E731
    none, live = slots < 0, slots >= 0
    delta_got, delta_want = got - y.double(), want - y.double()
    if len(slots) > 1 and not close(got, want):  # every delta right, some on the wrong row
        same = torch.cdist(delta_got, delta_want) < 1e-3 * (1 + delta_want.abs().max())
        if same.any(1).all() and same.any(0).all():
            return ("each delta is right but landed on another row: the segment's results must be scattered back "
                    "to the rows they were gathered from")
    if none.any() and not close(got[none], y[none].double()):
        return "rows without an adapter (slot -1) were changed: they must be left exactly as they were"
    if a.shape[1] == a.shape[2] == b.shape[1]:  # square: A and B used the wrong way round go unnoticed by the shapes
        t = lambda m: m.double().transpose(1, 2)  # noqa: E731
        for what, a_used, b_used in (("A and B transposed", t(a), t(b)), ("A transposed", t(a), b.double()),
                                     ("B transposed", a.double(), t(b)), ("A and B swapped", b.double(), a.double()),
                                     ("A and B swapped and transposed", t(b), t(a))):
            if close(got, add_lora_reference(y.double().clone(), x.double(), slots, a_used, b_used, scaling.double())):
                return f"{what}: A is [r, in] and B is [out, r]; the delta is (x @ A^T) @ B^T"
    ratio = float((delta_got * delta_want).sum() / (delta_want * delta_want).sum().clamp_min(1e-30))
    if live.any() and close(delta_got, ratio * delta_want):
        return f"the deltas are the definition's times {ratio:.4g}: the scaling is applied wrongly"
    return "not the row-by-row definition"


SHAPES = st.tuples(st.integers(1, 12), st.integers(1, 9), st.integers(1, 9), st.integers(1, 4), st.integers(1, 5))


@st.composite
def cases(draw):
    rows, fan_in, fan_out, num_slots, max_rank = draw(SHAPES)
    ranks = [draw(st.integers(1, max_rank)) for _ in range(num_slots)]
    slot_of_row = draw(st.lists(st.integers(-1, num_slots - 1), min_size=rows, max_size=rows))
    return rows, fan_in, fan_out, num_slots, ranks, max_rank, slot_of_row


@pytest.mark.task("11.3")
@settings(max_examples=60)
@given(spec=cases(), seed=st.integers(0, 3))
@example(spec=(1, 5, 7, 2, [2, 3], 3, [1]), seed=0)  # one row
@example(spec=(6, 5, 7, 2, [3, 3], 3, [1] * 6), seed=0)  # every row one adapter
@example(spec=(4, 5, 7, 2, [3, 1], 3, [-1] * 4), seed=0)  # no adapter at all
@example(spec=(8, 6, 4, 3, [1, 2, 1], 4, [2, 0, -1, 1, 0, 2, -1, 1]), seed=1)  # ranks below the maximum
@example(spec=(5, 4, 4, 2, [4, 4], 4, [0, 1, 1, -1, 0]), seed=2)  # square: A and B the wrong way round fit
@example(spec=(7, 6, 5, 3, [2, 3, 1], 3, [2, 2, 0, 1, 0, 2, 1]), seed=3)  # rows of one adapter far apart
def test_add_lora_is_the_row_by_row_definition(spec, seed):
    rows, fan_in, fan_out, num_slots, ranks, max_rank, slot_of_row = spec
    x, y, a, b, scaling, slots = case(rows, fan_in, fan_out, num_slots, ranks, max_rank, slot_of_row, seed)
    before = y.clone()
    got = add_lora(y, x, group_rows(slots), a, b, scaling)
    assert got is y, "add_lora adds in place and returns y"
    want = expected(x, before, a, b, scaling, slots)
    assert torch.allclose(y.double(), want, rtol=1e-4, atol=1e-4), name_the_mistake(y, x, before, a, b, scaling, slots)


@pytest.mark.task("11.3")
@settings(max_examples=60)
@given(slot_of_row=st.lists(st.integers(-1, 5), max_size=20))
@example(slot_of_row=[])
@example(slot_of_row=[-1, -1])
@example(slot_of_row=[3, 3, 3])
def test_group_rows_puts_every_adapted_row_in_the_one_segment_of_its_slot(slot_of_row):
    slots = torch.tensor(slot_of_row, dtype=torch.long)
    segments = group_rows(slots)
    assert segments.num_rows == len(slot_of_row), "num_rows is the step's row count"
    seen = []
    for start, length, slot in zip(segments.starts.tolist(), segments.lengths.tolist(), segments.slots.tolist()):
        rows = segments.order[start : start + length].tolist()
        assert length > 0, "no empty segment"
        assert all(slot_of_row[i] == slot for i in rows), f"segment of slot {slot} holds rows of other slots: {rows}"
        seen += rows
    assert sorted(seen) == [i for i, s in enumerate(slot_of_row) if s >= 0], \
        "every row with an adapter is in exactly one segment, and no row without one"
    assert len(set(segments.slots.tolist())) == len(segments), "one segment per slot"


@pytest.mark.task("11.3")
def test_add_lora_reads_each_adapter_once_not_once_per_row():
    """A decode step of 256 rows over 4 adapters at SmolLM2's width: grouped, it beats a row loop by far."""
    x, y, a, b, scaling, slots = case(256, 576, 576, 4, [16] * 4, 16, [i % 4 for i in range(256)])
    segments = group_rows(slots)

    def best(run, repeats=5):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times)

    grouped = best(lambda: add_lora(y, x, segments, a, b, scaling))
    per_row = best(lambda: add_lora_reference(y, x, slots, a, b, scaling), repeats=3)
    assert grouped * 4 < per_row, (f"add_lora took {grouped * 1e3:.2f} ms, the row-by-row loop {per_row * 1e3:.2f} ms: "
                                   "group the rows so that each adapter's A and B are multiplied once per segment")
