"""Which weights go into which blocks: the quantization schemes a user names, and a model swapped to them.

    none         float weights as loaded
    int8         8-bit codes, one scale per output channel
    int4         4-bit codes in groups of 32 with a minimum (Q4_1's format); int4-g64, int4-g128 for wider
                 groups, int4-sym (and int4-sym-g64, ...) for a symmetric format without a minimum
    gguf         the GGUF file's own Q4_1 / Q8_0 blocks as they are (the bundled SmolLM2)

Only the decoder layers' projections are quantized by int8 and int4 (the embedding and the head stay
float: they are a small share of a large model's bytes, and the head decides every token); gguf keeps
every tensor the file holds in blocks, the embedding and head included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from miniyaie.quant.linear import QuantizedLinear, float_linear, merge_blocks
from miniyaie.quant.quantize import quantize_int4, quantize_int8

SCHEMES = ("none", "int8", "int4", "gguf")
_INT4 = re.compile(r"^int4(?P<sym>-sym)?(?:-g(?P<group>\d+))?$")
LAYER_PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


@dataclass(frozen=True)
class Scheme:
    name: str  # as the user wrote it
    kind: str  # one of SCHEMES
    group: int = 32
    symmetric: bool = False


def parse_scheme(text: str) -> Scheme:
    """A scheme's name as a Scheme; ValueError (one line) naming the choices for anything else."""
    text = str(text).strip()
    if text in ("none", "int8", "gguf"):
        return Scheme(text, text, group=0)
    match = _INT4.match(text)
    if match:
        group = int(match["group"] or 32)
        if group not in (32, 64, 128):
            raise ValueError(f"quantization {text!r}: int4 groups are 32, 64 or 128 weights")
        return Scheme(text, "int4", group, bool(match["sym"]))
    raise ValueError(f"unknown quantization {text!r}; choose from none, int8, int4 (int4-g64, int4-g128, "
                     "int4-sym, int4-sym-g64, ...), gguf")


def quantize_model(model: nn.Module, scheme: str, group: int | None = None,
                   gguf_path: str | Path | None = None) -> int:
    """Swap the model's weights for blocks in place (see the module's docstring); returns how many tensors.

    `group` overrides an int4 scheme's group. ValueError (one line) where the scheme cannot apply: an
    unknown name, a layer whose width is not a multiple of the group, gguf without a GGUF file.
    """
    chosen = parse_scheme(scheme)
    if chosen.kind == "none":
        return 0
    if chosen.kind == "gguf":
        from miniyaie.quant.gguf_loader import load_gguf_blocks

        if gguf_path is None:
            raise ValueError("quantization 'gguf' runs a GGUF file's own blocks: the model must come from a GGUF "
                             "file (the bundled SmolLM2 does)")
        count = load_gguf_blocks(model, gguf_path)
        merge_blocks(model)
        return count
    replaced = []
    for i, layer in enumerate(model.model.layers):
        for name in LAYER_PROJECTIONS:
            parent_name, child = name.split(".")
            parent = getattr(layer, parent_name)
            linear = float_linear(getattr(parent, child))
            try:
                weight = (quantize_int8(linear.weight) if chosen.kind == "int8"
                          else quantize_int4(linear.weight, group or chosen.group, chosen.symmetric))
            except ValueError as exc:
                raise ValueError(f"layer {i} {name}: {exc}") from None
            replaced.append((parent, child, QuantizedLinear(weight, linear.bias)))
    for parent, child, layer in replaced:  # all or nothing: a layer that cannot be quantized changes none
        setattr(parent, child, layer)
    merge_blocks(model)
    return len(replaced)
