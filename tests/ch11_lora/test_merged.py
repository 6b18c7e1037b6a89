"""Task 11.5: one shrink for a merged group (q/k/v, gate/up), each member's delta on its own output.

The oracle is each member alone through the row-by-row definition (add_lora_reference): the merged
path must give every member exactly that, whatever the members' widths (q is wider than k and v with
grouped-query attention). Known wrong answers are recognised and named.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from torch.overrides import TorchFunctionMode

from miniyaie.lora import add_lora_reference, add_merged_lora, group_rows

MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__, torch.mm,
           torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.Tensor.addmm, torch.baddbmm,
           torch.nn.functional.linear, torch.einsum, torch.tensordot, torch.mv, torch.Tensor.mv}


class CountShrinks(TorchFunctionMode):
    """Counts the matrix products with an operand that has x's input width: the shrinks (the expands never see it)."""

    def __init__(self, fan_in: int):
        super().__init__()
        self.fan_in, self.shrinks = fan_in, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in MATMULS:
            operands = [t for t in (*args, *(kwargs or {}).values()) if isinstance(t, torch.Tensor)]
            self.shrinks += any(self.fan_in in t.shape for t in operands)
        return func(*args, **(kwargs or {}))


def members_case(rows, fan_in, widths, num_slots, max_rank, slot_of_row, seed):
    g = torch.Generator().manual_seed(seed)
    a_group = torch.randn(num_slots, len(widths) * max_rank, fan_in, generator=g)
    bs = [torch.randn(num_slots, width, max_rank, generator=g) for width in widths]
    x = torch.randn(rows, fan_in, generator=g)
    merged_out = torch.randn(rows, sum(widths), generator=g)  # one matmul's output; members are its column slices
    scaling = torch.rand(num_slots, generator=g) + 0.5
    return x, a_group, bs, merged_out, scaling, torch.tensor(slot_of_row, dtype=torch.long)


def member_alone(out, x, a_group, b, j, max_rank, scaling, slots):
    a = a_group[:, j * max_rank : (j + 1) * max_rank]
    return add_lora_reference(out.double().clone(), x.double(), slots, a.double(), b.double(), scaling.double())


def name_the_mistake(j, got, before, x, a_group, bs, max_rank, scaling, slots) -> str:
    close = lambda u, v: u.shape == v.shape and torch.allclose(u.double(), v, rtol=1e-4, atol=1e-4)  # noqa: E731
    members = len(bs)
    for k in range(members):  # member j's delta from member k's rank columns (its A)
        if k != j and close(got, member_alone(before[j], x, a_group, bs[j], k, max_rank, scaling, slots)):
            return (f"member {j} used member {k}'s slice of the group's shrink (its A): member j's intermediate is "
                    f"columns j * R .. (j + 1) * R - 1, R = max rank")
    for k in range(members):
        if k != j and bs[k].shape == bs[j].shape and \
                close(got, member_alone(before[j], x, a_group, bs[k], k, max_rank, scaling, slots)):
            return f"member {j}'s output got member {k}'s delta: each member's expand goes to its own output"
    if close(got, member_alone(before[j], x, a_group, bs[j], j, max_rank, torch.ones_like(scaling), slots)):
        return f"member {j}'s delta lacks the scaling: each segment's delta is multiplied by scaling[slot]"
    delta_got, delta_want = got.double() - before[j].double(), \
        member_alone(before[j], x, a_group, bs[j], j, max_rank, scaling, slots) - before[j].double()
    ratio = float((delta_got * delta_want).sum() / (delta_want * delta_want).sum().clamp_min(1e-30))
    if close(delta_got, ratio * delta_want):
        return f"member {j}'s delta is its own times {ratio:.4g}: the scaling is applied wrongly (scaling[slot], once)"
    return f"member {j}'s output is not its own delta (the definition with its A slice and its B)"


@st.composite
def groups(draw):
    widths = draw(st.sampled_from([(8, 4, 4), (6, 6), (4, 4, 4), (12, 4, 4)]))
    rows, fan_in, num_slots, max_rank = draw(st.integers(1, 9)), draw(st.integers(1, 7)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    slot_of_row = draw(st.lists(st.integers(-1, num_slots - 1), min_size=rows, max_size=rows))
    return rows, fan_in, widths, num_slots, max_rank, slot_of_row


@pytest.mark.task("11.5")
@settings(max_examples=40)
@given(spec=groups(), seed=st.integers(0, 3))
@example(spec=(5, 6, (8, 4, 4), 2, 3, [0, 1, -1, 1, 0]), seed=0)  # q/k/v of a GQA model
@example(spec=(4, 5, (6, 6), 2, 2, [1, 1, 0, -1]), seed=1)  # gate/up: equal widths
@example(spec=(3, 4, (4, 4, 4), 1, 2, [0, 0, 0]), seed=2)  # one adapter, equal widths
def test_add_merged_lora_gives_each_member_its_own_delta(spec, seed):
    rows, fan_in, widths, num_slots, max_rank, slot_of_row = spec
    x, a_group, bs, merged_out, scaling, slots = members_case(rows, fan_in, widths, num_slots, max_rank, slot_of_row, seed)
    outputs = merged_out.split(list(widths), dim=-1)  # views, as a merged matmul hands them back
    before = [out.clone() for out in outputs]
    add_merged_lora(outputs, x, group_rows(slots), a_group, bs, scaling)
    for j, (got, b) in enumerate(zip(outputs, bs)):
        want = member_alone(before[j], x, a_group, b, j, max_rank, scaling, slots)
        assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4), \
            name_the_mistake(j, got, before, x, a_group, bs, max_rank, scaling, slots)
    start = 0
    for j, width in enumerate(widths):  # the views' writes reached the merged output
        assert torch.equal(merged_out[:, start : start + width], outputs[j]), "add into the outputs in place"
        start += width


@pytest.mark.task("11.5")
@pytest.mark.parametrize("widths", [(8, 4, 4), (6, 6)], ids=["q/k/v", "gate/up"])
def test_add_merged_lora_shrinks_a_segment_once_for_the_whole_group(widths):
    """The point of the merged path: one matmul of a segment's rows by the group's A, not one per member."""
    fan_in, slot_of_row = 11, [1, 0, -1, 1, 0, 1]  # fan_in unlike every other size here
    x, a_group, bs, merged_out, scaling, slots = members_case(6, fan_in, widths, 2, 3, slot_of_row, seed=0)
    segments = group_rows(slots)
    counter = CountShrinks(fan_in)
    with counter:
        add_merged_lora(merged_out.split(list(widths), dim=-1), x, segments, a_group, bs, scaling)
    assert counter.shrinks <= len(segments), (
        f"{counter.shrinks} shrinks (products with x's {fan_in} input features) for {len(segments)} segments of "
        f"{len(widths)} members: one shrink per segment by the whole group's A, not one per member")
