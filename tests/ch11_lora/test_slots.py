"""Task 11.2: adapters in slots. After any sequence of loads and unloads, a slot multiplies as its adapter.

The check reads a slot only the way the step does: the batched multiply's definition
(add_lora_reference, provided) over the slot's A and B and scaling must give the adapter's own
delta (scaling * B @ A, from the adapter) for every layer and module, and nothing for an empty slot.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.lora import AdapterError, LoRAAdapter, LoRASlots, add_lora_reference, projection_shapes
from miniyaie.model.config import ModelConfig

CONFIG = ModelConfig(family="llama", vocab_size=64, hidden_size=16, intermediate_size=24, num_layers=2, num_heads=4,
                     num_kv_heads=2, head_dim=4, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=10000.0)
MODULES = sorted(projection_shapes(CONFIG))
MAX_RANK, NUM_SLOTS = 4, 3


def make_adapter(seed: int, rank: int, modules: list[str], name: str | None = None) -> LoRAAdapter:
    g = torch.Generator().manual_seed(seed)
    weights = {}
    for layer in range(CONFIG.num_layers):
        for module in modules:
            fan_in, fan_out = projection_shapes(CONFIG)[module]
            weights[(layer, module)] = (torch.randn(rank, fan_in, generator=g), torch.randn(fan_out, rank, generator=g))
    return LoRAAdapter(name or f"adapter-{seed}", rank, 0.5 + seed, weights)


def slot_delta(slots: LoRASlots, slot: int, layer: int, module: str) -> torch.Tensor:
    """What the slot adds to the projection for an identity input: the delta^T, read through the multiply's definition."""
    fan_in, fan_out = slots.shapes[module]
    x = torch.eye(fan_in, dtype=torch.float64)
    y = torch.zeros(fan_in, fan_out, dtype=torch.float64)
    a, b = slots.a_of(module)[:, layer].double(), slots.b[module][:, layer].double()
    add_lora_reference(y, x, torch.full((fan_in,), slot), a, b, slots.scaling.double())
    return y.T


def assert_slot_holds(slots: LoRASlots, slot: int, adapter: LoRAAdapter | None) -> None:
    assert slots.names[slot] == (adapter.name if adapter else None), \
        f"slot {slot} is named {slots.names[slot]!r}, should hold {adapter.name if adapter else None!r}"
    for layer in range(CONFIG.num_layers):
        for module in MODULES:
            got = slot_delta(slots, slot, layer, module)
            if adapter is None or (layer, module) not in adapter.weights:
                what = "it is empty" if adapter is None else f"{adapter.name} does not adapt it"
                assert torch.count_nonzero(got) == 0, (
                    f"slot {slot}, layer {layer} {module}: adds a delta where {what}: something of a previous "
                    "adapter is left in the slot (a smaller rank, or a module the new one does not adapt)")
            else:
                want = adapter.delta(layer, module)
                assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), \
                    f"slot {slot}, layer {layer} {module}: not {adapter.name}'s delta (rank {adapter.rank}, max {MAX_RANK})"
    if adapter is None:
        return
    assert abs(float(slots.scaling[slot]) - adapter.scaling) <= 1e-6 * abs(adapter.scaling), (
        f"slot {slot}: scaling[slot] is {float(slots.scaling[slot])}, {adapter.name}'s scaling is {adapter.scaling}: "
        "the slot keeps the adapter's own scaling (not folded into B)")
    rank = adapter.rank
    for (layer, module), (a, b) in adapter.weights.items():
        assert torch.equal(slots.a_of(module)[slot, layer, :rank], a.to(slots.a_of(module).dtype)) and \
            torch.equal(slots.b[module][slot, layer, :, :rank], b.to(slots.b[module].dtype)), (
            f"slot {slot}, layer {layer} {module}: the stored A and B are not {adapter.name}'s own (its first "
            f"{rank} rows of A and columns of B): the slot holds the adapter's tensors, its scaling kept apart")


ADAPTERS = [make_adapter(0, 4, MODULES), make_adapter(1, 1, ["q_proj", "v_proj"]), make_adapter(2, 2, MODULES[:4]),
            make_adapter(3, 3, ["down_proj", "k_proj"])]
# an operation: (slot, adapter index) loads, (slot, None) unloads
OPERATIONS = st.lists(st.tuples(st.integers(0, NUM_SLOTS - 1), st.one_of(st.none(), st.integers(0, len(ADAPTERS) - 1))),
                      min_size=1, max_size=6)


@pytest.mark.task("11.2")
@settings(max_examples=25)
@given(operations=OPERATIONS)
@example(operations=[(0, 0), (0, 1)])  # a smaller rank over a larger one, fewer modules over all
@example(operations=[(1, 0), (1, None), (1, 3)])
@example(operations=[(2, 1)])
def test_a_slot_multiplies_as_its_adapter_after_any_loads(operations):
    slots = LoRASlots(CONFIG, NUM_SLOTS, MAX_RANK)
    held: list[LoRAAdapter | None] = [None] * NUM_SLOTS
    for slot, which in operations:
        if which is None:
            slots.unload(slot)
            held[slot] = None
        else:
            slots.load(slot, ADAPTERS[which])
            held[slot] = ADAPTERS[which]
    for slot in range(NUM_SLOTS):
        assert_slot_holds(slots, slot, held[slot])


@pytest.mark.task("11.2")
def test_a_refused_adapter_leaves_the_slot_as_it_was():
    slots = LoRASlots(CONFIG, NUM_SLOTS, MAX_RANK)
    slots.load(1, ADAPTERS[2])
    before = [stack[1].clone() for stack in (*slots.a.values(), *slots.b.values(), slots.scaling)]

    def unchanged(what: str) -> None:
        after = [stack[1] for stack in (*slots.a.values(), *slots.b.values(), slots.scaling)]
        assert all(torch.equal(u, v) for u, v in zip(before, after)) and slots.names[1] == ADAPTERS[2].name, (
            f"refusing {what} changed slot 1: a refused load must leave the slot as it was (check everything "
            "before writing or zeroing anything)")

    too_big = make_adapter(7, MAX_RANK + 1, MODULES, name="too-big")
    with pytest.raises(AdapterError, match="too-big"):
        slots.load(1, too_big)
    unchanged("too-big")
    misfit = make_adapter(8, 2, ["q_proj"], name="misfit")
    a, b = misfit.weights[(0, "q_proj")]
    misfit.weights[(0, "q_proj")] = (a[:, :-1], b)  # one input feature short
    with pytest.raises(AdapterError, match="misfit"):
        slots.load(1, misfit)
    unchanged("misfit")
    beyond = make_adapter(9, 2, ["v_proj"], name="beyond")
    beyond.weights[(CONFIG.num_layers, "v_proj")] = beyond.weights[(0, "v_proj")]  # a layer the model lacks
    with pytest.raises(AdapterError, match="beyond"):
        slots.load(1, beyond)
    unchanged("beyond")
    assert_slot_holds(slots, 1, ADAPTERS[2])
    with pytest.raises(IndexError):
        slots.load(NUM_SLOTS, ADAPTERS[0])
