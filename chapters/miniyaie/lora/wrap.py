"""Putting chapter 11 into a loaded model: every layer's projections wrapped (layer.py), its layer ops too
(merged.py), and undone."""

from __future__ import annotations

from torch import nn

from miniyaie.lora.adapter import PROJECTIONS
from miniyaie.lora.layer import LoRABatch, LoRALinear
from miniyaie.lora.merged import LoRAProjectionOps
from miniyaie.lora.slots import LoRASlots


def apply_lora(model: nn.Module, slots: LoRASlots, batch: LoRABatch | None = None) -> LoRABatch:
    """Wrap every layer's seven projections of `model` (a CausalLM) in LoRALinear and its layer ops in
    LoRAProjectionOps; returns the batch they share. Wrapping twice wraps nothing more.

    Call it after the backend is chosen (backends/choose.py use_backend): a backend that merges
    q/k/v and gate/up into one matmul keeps doing so for the wrapped projections only if it merged
    them before; merged later, it finds LoRALinear modules and leaves them unmerged (still correct).
    """
    batch = LoRABatch() if batch is None else batch
    if slots.config.num_layers != len(model.model.layers):
        raise ValueError(f"the slots are for {slots.config.num_layers} layers; the model has {len(model.model.layers)}")
    stacks, weights = next(iter(slots.b.values())), next(model.parameters())
    if (stacks.dtype, stacks.device) != (weights.dtype, weights.device):
        raise ValueError(f"the slots hold {stacks.dtype} on {stacks.device}, the model computes in {weights.dtype} on "
                         f"{weights.device}: make LoRASlots with the model's dtype and device")
    for index, layer in enumerate(model.model.layers):
        for module, parent_name in PROJECTIONS.items():
            parent = getattr(layer, parent_name)
            current = getattr(parent, module)
            if isinstance(current, LoRALinear):
                current.slots, current.batch = slots, batch
            else:
                setattr(parent, module, LoRALinear(current, slots, index, module, batch))
    if not isinstance(model.ops, LoRAProjectionOps):
        model.ops = LoRAProjectionOps(model.ops)
    return batch


def remove_lora(model: nn.Module) -> None:
    """Undo apply_lora: the base projections and the layer ops back in place."""
    for layer in model.model.layers:
        for module, parent_name in PROJECTIONS.items():
            parent = getattr(layer, parent_name)
            current = getattr(parent, module)
            if isinstance(current, LoRALinear):
                setattr(parent, module, current.base)
    if isinstance(model.ops, LoRAProjectionOps):
        model.ops = model.ops.inner
