"""Chapter 0: a Llama-family model that reads and writes an explicit KV cache."""

from miniyaie.model.attention import AttentionBackend, AttentionMetadata, TorchAttentionBackend, causal_attention
from miniyaie.model.config import ModelConfig, UnsupportedModelError
from miniyaie.model.generate import Generation, PromptTooLongError, TokenEvent, generate, generate_stream
from miniyaie.model.kv_cache import KVCache
from miniyaie.model.layers import LayerOps, apply_rotary, rms_norm, rope_cos_sin, rope_inverse_frequencies, swiglu
from miniyaie.model.loader import LoadedModel, ModelLoadError, load, load_model, load_tokenizer, resolve_model_path
from miniyaie.model.sampling import SamplingParams, sample, top_p_filter
from miniyaie.model.transformer import CausalLM

__all__ = [
    "AttentionBackend", "AttentionMetadata", "TorchAttentionBackend", "causal_attention",
    "ModelConfig", "UnsupportedModelError",
    "Generation", "PromptTooLongError", "TokenEvent", "generate", "generate_stream",
    "KVCache",
    "LayerOps", "apply_rotary", "rms_norm", "rope_cos_sin", "rope_inverse_frequencies", "swiglu",
    "LoadedModel", "ModelLoadError", "load", "load_model", "load_tokenizer", "resolve_model_path",
    "SamplingParams", "sample", "top_p_filter",
    "CausalLM",
]
