"""Weights kept in 4- and 8-bit blocks (GGUF's Q4_1 and Q8_0, and int4/int8 of any model) and the linears over them."""

from miniyaie.quant.blocks import QuantizedWeight, from_gguf_blocks, quantize_int4, quantize_int8
from miniyaie.quant.linear import QuantizedEmbedding, QuantizedLinear, quantize_loaded, quantize_model, weight_bytes

__all__ = ["QuantizedEmbedding", "QuantizedLinear", "QuantizedWeight", "from_gguf_blocks", "quantize_int4",
           "quantize_int8", "quantize_loaded", "quantize_model", "weight_bytes"]
