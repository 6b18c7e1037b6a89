"""The few numbers our forward pass needs, read from a Hugging Face config."""

from __future__ import annotations

from dataclasses import dataclass, field

SUPPORTED_FAMILIES = ("llama", "qwen2", "qwen3")
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


class UnsupportedModelError(ValueError):
    """A model this engine cannot run (family, rope type, feature)."""


@dataclass(frozen=True)
class ModelConfig:
    family: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    max_position_embeddings: int
    rope_theta: float
    rope_scaling: dict = field(default_factory=dict)  # rope_type and its parameters
    tie_word_embeddings: bool = False
    qkv_bias: bool = False  # Qwen2 has biases on q, k and v
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3 normalises q and k per head before RoPE

    @classmethod
    def from_hf(cls, hf) -> "ModelConfig":
        family = hf.model_type
        if family not in SUPPORTED_FAMILIES:
            raise UnsupportedModelError(
                f"model type {family!r} is not supported; supported: {', '.join(SUPPORTED_FAMILIES)}"
            )
        if getattr(hf, "use_sliding_window", False):
            raise UnsupportedModelError("sliding-window attention is not supported")
        rope = dict(getattr(hf, "rope_parameters", None) or {})
        if not rope:  # configs written before transformers 5
            rope = dict(getattr(hf, "rope_scaling", None) or {})
            rope.setdefault("rope_theta", getattr(hf, "rope_theta", 10000.0))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in SUPPORTED_ROPE_TYPES:
            raise UnsupportedModelError(
                f"rope type {rope_type!r} is not supported; supported: {', '.join(SUPPORTED_ROPE_TYPES)}"
            )
        rope["rope_type"] = rope_type
        head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
        attention_bias = bool(getattr(hf, "attention_bias", False))
        return cls(
            family=family,
            vocab_size=hf.vocab_size,
            hidden_size=hf.hidden_size,
            intermediate_size=hf.intermediate_size,
            num_layers=hf.num_hidden_layers,
            num_heads=hf.num_attention_heads,
            num_kv_heads=getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads,
            head_dim=head_dim,
            rms_norm_eps=hf.rms_norm_eps,
            max_position_embeddings=hf.max_position_embeddings,
            rope_theta=float(rope.pop("rope_theta")),
            rope_scaling=rope,
            tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
            qkv_bias=family == "qwen2" or attention_bias,
            o_bias=family != "qwen2" and attention_bias,
            mlp_bias=bool(getattr(hf, "mlp_bias", False)),
            qk_norm=family == "qwen3",
        )

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes of K and V that one token occupies across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes
