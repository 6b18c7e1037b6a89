"""The provided C++ LoRA kernel (backends/cpu/lora_delta.py): the torch path's results, in one call per projection.

Ungraded: the kernel is provided code. Its oracle is the row-by-row definition in float64
(add_lora_reference), member by member; tolerances are relative to the deltas' size (the kernel
adds in another order than torch). The last test shows the model's projections reach it.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.backends.cpu import kernels as cpu_kernels
from miniyaie.backends.cpu import lora_delta
from miniyaie.lora import Segments, add_lora_reference

pytestmark = [pytest.mark.ungraded,
              pytest.mark.skipif(cpu_kernels.load() is None, reason="the CPU kernels cannot be built here")]


def segments_of(slot_of_row: list[int], seed: int | None = None) -> Segments:
    """The rows grouped by slot without chapter 11's group_rows (this file tests provided code only); with a
    seed, the segments and each segment's rows in a random order (the kernel must not rely on any)."""
    present = sorted({s for s in slot_of_row if s >= 0})
    pieces = [[i for i, s in enumerate(slot_of_row) if s == slot] for slot in present]
    if seed is not None:
        g = torch.Generator().manual_seed(seed)
        pieces = [[p[i] for i in torch.randperm(len(p), generator=g).tolist()] for p in pieces]
        shuffle = torch.randperm(len(pieces), generator=g).tolist()
        pieces, present = [pieces[i] for i in shuffle], [present[i] for i in shuffle]
    lengths = torch.tensor([len(p) for p in pieces], dtype=torch.long)
    order = torch.tensor([i for p in pieces for i in p], dtype=torch.long)
    return Segments(order, torch.cumsum(lengths, 0) - lengths, lengths, torch.tensor(present, dtype=torch.long),
                    len(slot_of_row))


def make(rows, fan_in, widths, num_slots, max_rank, ranks, slot_of_row, seed, strided):
    """x, the group's A [slots, members * R, in] (zero past each slot's rank), the Bs, one merged output, scaling."""
    g = torch.Generator().manual_seed(seed)
    members = len(widths)
    a = torch.zeros(num_slots, members * max_rank, fan_in)
    bs = [torch.zeros(num_slots, w, max_rank) for w in widths]
    for s, r in enumerate(ranks):
        for j in range(members):
            a[s, j * max_rank : j * max_rank + r] = torch.randn(r, fan_in, generator=g)
            bs[j][s, :, :r] = torch.randn(widths[j], r, generator=g)
    wide = torch.randn(rows, fan_in + 3 * strided, generator=g)
    x = wide[:, 1 : 1 + fan_in] if strided else wide  # rows further apart than their width
    merged = torch.randn(rows, sum(widths), generator=g)
    scaling = torch.rand(num_slots, generator=g) + 0.5
    return x, a, bs, merged, scaling, torch.tensor(slot_of_row, dtype=torch.long)


def check(x, a, bs, merged, scaling, slots, segments, widths):
    outputs = merged.split(list(widths), dim=-1)  # members' outputs: column slices of one matmul's output
    before = [out.clone() for out in outputs]
    assert lora_delta.run_kernel(outputs, x, segments, a, bs, scaling), "the kernel took float32 CPU tensors"
    rank = bs[0].shape[-1]
    for j, (out, b) in enumerate(zip(outputs, bs)):
        a_j = a[:, j * rank : (j + 1) * rank]
        want = add_lora_reference(before[j].double(), x.double(), slots, a_j.double(), b.double(), scaling.double())
        size = (want - before[j].double()).abs().max().item() + 1.0
        error = (out.double() - want).abs().max().item()
        assert error <= 2e-5 * size, f"member {j} (width {out.shape[1]}): off by {error:.3g} (deltas up to {size:.3g})"
        untouched = slots < 0
        assert torch.equal(out[untouched], before[j][untouched]), f"member {j}: a row without an adapter changed"


@st.composite
def groups(draw):
    widths = draw(st.sampled_from([(7,), (64,), (150,), (1, 65), (40, 8, 8), (576, 192, 192)]))  # across 4 W
    rows = draw(st.integers(1, 64))
    fan_in = draw(st.sampled_from([1, 3, 15, 16, 17, 33, 576]))
    num_slots, max_rank = draw(st.integers(1, 5)), draw(st.sampled_from([1, 2, 3, 5, 8, 16, 17, 32]))
    ranks = [draw(st.integers(1, max_rank)) for _ in range(num_slots)]
    slot_of_row = draw(st.lists(st.integers(-1, num_slots - 1), min_size=rows, max_size=rows))
    return rows, fan_in, widths, num_slots, max_rank, ranks, slot_of_row


@settings(max_examples=80, deadline=None)
@given(spec=groups(), seed=st.integers(0, 3), strided=st.booleans())
@example(spec=(1, 576, (576,), 2, 16, [16, 16], [1]), seed=0, strided=False)  # one row
@example(spec=(64, 576, (576, 192, 192), 8, 16, [16, 3, 16, 8, 1, 16, 5, 16], [i % 9 - 1 for i in range(64)]), seed=1,
         strided=True)  # 64 rows of q/k/v, rows without an adapter, ranks below the maximum
@example(spec=(5, 17, (65, 1), 3, 5, [2, 5, 1], [2, -1, 0, 2, 1]), seed=2, strided=False)  # odd widths everywhere
@example(spec=(4, 3, (7,), 2, 2, [1, 2], [-1, -1, -1, -1]), seed=0, strided=False)  # no row with an adapter
@example(spec=(6, 33, (65, 7), 3, 16, [16, 9, 16], [0, 1, 2, 2, 0, 1]), seed=3, strided=True)  # rank 16, 2 rows a slot
@example(spec=(9, 16, (64,), 2, 8, [8, 5], [0, 1, 0, 1, 0, 1, 0, 1, 0]), seed=1, strided=False)  # rank 8, 4-5 rows
def test_kernel_adds_each_members_row_by_row_delta(spec, seed, strided):
    rows, fan_in, widths, num_slots, max_rank, ranks, slot_of_row = spec
    x, a, bs, merged, scaling, slots = make(rows, fan_in, widths, num_slots, max_rank, ranks, slot_of_row, seed, strided)
    check(x, a, bs, merged, scaling, slots, segments_of(slot_of_row), widths)


@settings(max_examples=30, deadline=None)
@given(slot_of_row=st.lists(st.integers(-1, 3), min_size=1, max_size=20), seed=st.integers(0, 5))
@example(slot_of_row=[3, 0, 3, 2, 0, 1], seed=0)
def test_kernel_takes_segments_in_any_order(slot_of_row, seed):
    """Segments need not come sorted by slot, nor their rows in step order."""
    x, a, bs, merged, scaling, slots = make(len(slot_of_row), 9, (5, 12), 4, 3, [3, 1, 2, 3], slot_of_row, seed, False)
    segments = segments_of(slot_of_row, seed)
    check(x, a, bs, merged, scaling, slots, segments, (5, 12))


def test_kernel_refuses_what_it_does_not_take_and_writes_nothing():
    x, a, bs, merged, scaling, slots = make(4, 6, (5,), 2, 2, [2, 2], [0, 1, -1, 1], 0, False)
    before = merged.clone()
    segments = segments_of(slots.tolist())
    assert not lora_delta.run_kernel((merged.double(),), x.double(), segments, a.double(), [bs[0].double()], scaling)
    assert not lora_delta.run_kernel((merged,), x.t().contiguous().t(), segments, a, bs, scaling), "x's columns apart"
    assert torch.equal(merged, before), "a refused call writes nothing"
    with pytest.raises(IndexError, match="out of range"):
        lora_delta.run_kernel((merged,), x, segments_of([0, 2, -1, 1]), a, bs, scaling)


@pytest.mark.parametrize("path", ["layer-ops", "cpu"])
def test_the_models_projections_reach_the_kernel_with_the_torch_paths_logits(lora_setup, path, monkeypatch):
    """Wrapped by apply_lora on a CPU: one kernel call per layer for each of q/k/v, o, gate/up and down, and the
    logits of the grouped torch path (MINIYAIE_LORA_KERNEL=0)."""
    if not lora_delta.enabled():
        pytest.skip("the kernel runs for the reference's chapter 11 only (a learner's tree runs their torch path)")
    from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
    from miniyaie.backends.choose import use_backend
    from miniyaie.lora import LoRASlots, apply_lora, load_adapter
    from miniyaie.model import AttentionMetadata, KVCache, load_model

    model = load_model(lora_setup.base_dir)
    if path == "cpu":
        use_backend(model, "cpu", "cpu")
    model.backend = BatchedTorchAttentionBackend()
    config, names = lora_setup.config, sorted(lora_setup.adapters)
    slots = LoRASlots(config, num_slots=len(names), max_rank=8)
    for slot, name in enumerate(names):
        slots.load(slot, load_adapter(lora_setup.adapters[name], config, max_rank=8))
    batch = apply_lora(model, slots)
    lens, slot_of_seq = [5, 3, 4, 2], [1, -1, 4, 1]
    ids = torch.randint(0, config.vocab_size, (sum(lens),), generator=torch.Generator().manual_seed(0))
    positions = torch.cat([torch.arange(n) for n in lens])

    def step():
        meta = AttentionMetadata(query_lens=lens, seq_lens=lens, block_tables=torch.arange(len(lens))[:, None],
                                 slot_mapping=torch.cat([i * 16 + torch.arange(n) for i, n in enumerate(lens)]),
                                 block_size=16)
        batch.set_sequences(slot_of_seq, lens)
        with torch.no_grad():
            return model.compute_logits(model(ids, positions, KVCache(config, 16 * len(lens), torch.float32), meta))

    before = lora_delta.calls
    fast = step()
    assert lora_delta.calls - before == 4 * config.num_layers, (
        f"{lora_delta.calls - before} kernel calls for {config.num_layers} layers: one per layer for each of q/k/v, o, "
        "gate/up and down")
    monkeypatch.setenv(lora_delta.ENV, "0")
    calls = lora_delta.calls
    torch_path = step()
    assert lora_delta.calls == calls, f"{lora_delta.ENV}=0 turns the kernel off"
    assert torch.allclose(fast, torch_path, rtol=1e-4, atol=1e-4), \
        f"logits differ from the torch path's by {(fast - torch_path).abs().max().item():.3g}"
