"""Chapter 11: many LoRA fine-tunes of one base model, served in one batch (adapters, slots, the batched multiply)."""

from miniyaie.lora.adapter import AdapterError, LoRAAdapter, load_adapter, projection_shapes
from miniyaie.lora.batched import Segments, add_lora, add_lora_reference, group_rows
from miniyaie.lora.layer import LoRABatch, LoRALinear
from miniyaie.lora.merged import LoRAProjectionOps, add_merged_lora
from miniyaie.lora.slots import NO_ADAPTER, LoRASlots
from miniyaie.lora.wrap import apply_lora, remove_lora

__all__ = ["AdapterError", "LoRAAdapter", "LoRABatch", "LoRALinear", "LoRAProjectionOps", "LoRASlots", "NO_ADAPTER",
           "Segments", "add_lora", "add_lora_reference", "add_merged_lora", "apply_lora", "group_rows", "load_adapter",
           "projection_shapes", "remove_lora"]
