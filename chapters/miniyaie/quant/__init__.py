"""Chapter 10: weights in 4- and 8-bit blocks (GGUF's Q4_1 and Q8_0, int4/int8 of any model) and the linears over them."""

from miniyaie.quant.blocks import QuantizedWeight, from_gguf_blocks, pack_nibbles, unpack_nibbles
from miniyaie.quant.gguf_loader import load_gguf_blocks
from miniyaie.quant.linear import QuantizedEmbedding, QuantizedLinear, weight_bytes
from miniyaie.quant.quantize import quantize_int4, quantize_int8
from miniyaie.quant.schemes import SCHEMES, parse_scheme, quantize_model

__all__ = ["QuantizedEmbedding", "QuantizedLinear", "QuantizedWeight", "SCHEMES", "from_gguf_blocks",
           "load_gguf_blocks", "pack_nibbles", "parse_scheme", "quantize_int4", "quantize_int8", "quantize_model",
           "unpack_nibbles", "weight_bytes"]
