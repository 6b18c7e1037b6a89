"""Chapter 4: Triton kernels for attention over the paged KV cache and the fused layers.

Every kernel `name` comes with `name_reference`, a plain-torch function of
the same signature that defines what it computes. On a machine without a
GPU the kernels run in Triton's interpreter (see _triton.py).

A module holding kernel `name` is called `name_kernel.py` (or after its
family: activation.py, sampling.py), so that `miniyaie.kernels.name` is the
function and `miniyaie.kernels.name_kernel` the module, never the same word.
"""

from miniyaie.kernels.activation import silu_and_mul, silu_and_mul_reference
from miniyaie.kernels.backend import TritonAttentionBackend, TritonLayerOps
from miniyaie.kernels.decode_attention_kernel import decode_attention, decode_attention_reference
from miniyaie.kernels.extend_attention_kernel import extend_attention, extend_attention_reference
from miniyaie.kernels.rms_norm_kernel import rms_norm, rms_norm_reference
from miniyaie.kernels.rotary_kernel import rotary, rotary_reference
from miniyaie.kernels.sampling import sample, sample_reference
from miniyaie.kernels.store_kv_kernel import store_kv, store_kv_reference

__all__ = [
    "TritonAttentionBackend", "TritonLayerOps",
    "decode_attention", "decode_attention_reference",
    "extend_attention", "extend_attention_reference",
    "store_kv", "store_kv_reference",
    "rms_norm", "rms_norm_reference",
    "rotary", "rotary_reference",
    "silu_and_mul", "silu_and_mul_reference",
    "sample", "sample_reference",
]
