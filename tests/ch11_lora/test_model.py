"""Tasks 11.1-11.5 together: our model with adapter i on the rows of request i gives peft's merged model's logits.

One packed batch mixes four adapters (different ranks, targets, rslora) and requests with none; each
request's logits must be those of peft's model with its adapter merged into the weights (the base
model's for a request without one), float32, tight tolerance: over a prefill and a decode step that
reads the K/V the prefill wrote. Three projection paths: the model's own layer ops (q/k/v called one
by one), the GPU path's merged projections (backends/merged_projections.py), the cpu backend's
packed and merged oneDNN linears (backends/cpu): the merged paths keep one matmul per group.
"""

from __future__ import annotations

import pytest
import torch
from lora_models import ADAPTERS

from miniyaie.backends.batched_attention import BatchedTorchAttentionBackend
from miniyaie.lora import LoRABatch, LoRALinear, LoRASlots, apply_lora, load_adapter
from miniyaie.model import AttentionMetadata, KVCache, load_model

NAMES = sorted(ADAPTERS)
BLOCK = 16


def prepare(path: str, folder):
    model = load_model(folder)
    model.backend = BatchedTorchAttentionBackend()
    if path == "merged":
        from miniyaie.backends.merged_projections import MergedProjectionOps, merge_projections

        assert merge_projections(model) > 0
        model.ops = MergedProjectionOps(model.ops)
    elif path == "cpu":
        from miniyaie.backends.choose import use_backend

        use_backend(model, "cpu", "cpu")
        model.backend = BatchedTorchAttentionBackend()
    return model


def run(model, batch, cache, seqs, slot_of_seq, chunks):
    """One packed step: sequence i runs its tokens chunks[i] = (start, end) with adapter slot slot_of_seq[i]."""
    ids, positions, kv_slots = [], [], []
    for i, (tokens, (start, end)) in enumerate(zip(seqs, chunks)):
        ids += tokens[start:end]
        positions += range(start, end)
        kv_slots += [i * BLOCK + p for p in range(start, end)]
    meta = AttentionMetadata(query_lens=[e - s for s, e in chunks], seq_lens=[e for _, e in chunks],
                             slot_mapping=torch.tensor(kv_slots), block_tables=torch.arange(len(seqs))[:, None],
                             block_size=BLOCK)
    batch.set_sequences(slot_of_seq, [e - s for s, e in chunks])
    return model.compute_logits(model(torch.tensor(ids), torch.tensor(positions), cache, meta))


@pytest.mark.task("11.5")
@pytest.mark.parametrize("path", ["layer-ops", "merged", "cpu"])
def test_each_request_gets_peft_merged_models_logits_in_a_mixed_batch(lora_setup, path):
    model = prepare(path, lora_setup.base_dir)
    config = lora_setup.config
    slots = LoRASlots(config, num_slots=len(NAMES) + 1, max_rank=8)
    for slot, name in enumerate(NAMES):  # slot 0 stays empty: slot numbers are not adapter numbers
        slots.load(slot + 1, load_adapter(lora_setup.adapters[name], config, max_rank=8))
    batch = apply_lora(model, slots)
    g = torch.Generator().manual_seed(3)
    slot_of_seq = [2, -1, 1, 4, 3, 5, -1, 1]
    seqs = [torch.randint(0, config.vocab_size, (n,), generator=g).tolist() for n in [6, 4, 9, 2, 5, 2, 3, 7]]
    cache = KVCache(config, BLOCK * len(seqs), torch.float32)
    prefill = run(model, batch, cache, seqs, slot_of_seq, [(0, len(s) - 1) for s in seqs])
    decode = run(model, batch, cache, seqs, slot_of_seq, [(len(s) - 1, len(s)) for s in seqs])
    start = 0
    for i, (tokens, slot) in enumerate(zip(seqs, slot_of_seq)):
        oracle = lora_setup.base if slot < 0 else lora_setup.merged(NAMES[slot - 1])
        with torch.no_grad():
            want = oracle(torch.tensor([tokens])).logits[0].float()
        got = torch.cat([prefill[start : start + len(tokens) - 1], decode[i : i + 1]])
        start += len(tokens) - 1
        who = "no adapter" if slot < 0 else f"adapter {NAMES[slot - 1]} (slot {slot})"
        error = (got - want).abs().max().item()
        assert error < 1e-4, (f"{path}: request {i} with {who}: logits differ from peft's merged model by {error:.3g}"
                              f"{' in the decode step' if torch.allclose(got[:-1], want[:-1], atol=1e-4) else ''}")
    groups = 2 * config.num_layers * 2  # q/k/v and gate/up, every layer, two steps
    if path != "layer-ops":  # the wrapped ops still ran q/k/v and gate/up as one matmul each
        merged = model.ops.merged_calls["project"] if path == "merged" else model.ops.calls["project"]
        assert merged == groups, f"{path}: {merged} merged matmuls ran, {groups} expected (one per group, layer and step)"


@pytest.mark.task("11.5")
def test_a_step_whose_rows_were_not_set_is_refused_not_served_wrong(lora_setup):
    linear = torch.nn.Linear(64, 64)
    slots = LoRASlots(lora_setup.config, 1, 2)
    batch = LoRABatch()
    layer = LoRALinear(linear, slots, 0, "q_proj", batch)
    x = torch.randn(3, 64)
    assert torch.equal(layer(x), linear(x)), "no rows set: the base projection alone"
    batch.set_rows([0, -1])
    with pytest.raises(ValueError, match="set for 2 rows"):
        layer(x)
    batch.set_rows([-1, -1])  # a stale step is refused whatever it holds, rows without adapters too
    try:
        layer(x)
    except ValueError as error:
        assert "set for 2 rows" in str(error), f"refused, but not by LoRABatch.active: {error}"
    else:
        raise AssertionError("a projection of 3 rows ran on a step set for 2 rows without adapters: ask "
                             "batch.active(rows) every time (it refuses a stale step whatever it holds)")
