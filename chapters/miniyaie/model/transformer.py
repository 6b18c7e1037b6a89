"""A Llama-family decoder (Llama, Qwen2, Qwen3) that reads and writes an explicit KV cache.

Module and parameter names mirror the Hugging Face checkpoints, so a
state dict loads as it is. The forward takes a packed batch of tokens from
many sequences plus the attention metadata of the step.
"""

from __future__ import annotations

import torch
from torch import nn

from miniyaie.model.attention import AttentionBackend, AttentionMetadata, TorchAttentionBackend
from miniyaie.model.config import ModelConfig
from miniyaie.model.kv_cache import KVCache
from miniyaie.model.layers import LayerOps, rms_norm, rope_cos_sin, rope_inverse_frequencies


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.config, self.layer_index = config, layer_index
        heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, heads * head_dim, bias=config.qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_heads * head_dim, bias=config.qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_heads * head_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, config.hidden_size, bias=config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(head_dim, config.rms_norm_eps)
        self.scale = head_dim**-0.5

    # ANCHOR: attention_forward
    def forward(self, x, cos, sin, kv_cache: KVCache, meta: AttentionMetadata, backend: AttentionBackend, ops: LayerOps):
        c = self.config
        q, k, v = ops.project(x, self.q_proj, self.k_proj, self.v_proj)
        q = q.view(-1, c.num_heads, c.head_dim)  # ops.project may return slices of one merged matmul: view, not copy
        k = k.view(-1, c.num_kv_heads, c.head_dim)
        v = v.view(-1, c.num_kv_heads, c.head_dim)
        if c.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = ops.rotary(q, k, cos, sin)
        k_cache, v_cache = kv_cache.layer(self.layer_index)
        out = backend.forward(q, k, v, k_cache, v_cache, meta, self.scale)
        return self.o_proj(out.reshape(-1, c.num_heads * c.head_dim))
    # ANCHOR_END: attention_forward


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x: torch.Tensor, ops: LayerOps) -> torch.Tensor:
        return ops.swiglu(x, self.gate_proj, self.up_proj, self.down_proj)


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    # ANCHOR: decoder_layer
    def forward(self, x, cos, sin, kv_cache, meta, backend, ops: LayerOps):
        normed, _ = ops.rms_norm(x, self.input_layernorm.weight, self.input_layernorm.eps)
        h = self.self_attn(normed, cos, sin, kv_cache, meta, backend, ops)
        h, x = ops.rms_norm(h, self.post_attention_layernorm.weight, self.post_attention_layernorm.eps, residual=x)
        return x + self.mlp(h, ops)  # above: x = x + attention, h = its norm (one fused op)
    # ANCHOR_END: decoder_layer


class DecoderModel(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class CausalLM(nn.Module):
    """The whole model: token ids in, next-token logits out, K/V kept in the cache."""

    def __init__(self, config: ModelConfig, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        self.model = DecoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.backend = backend or TorchAttentionBackend()
        self.ops = LayerOps()  # the engine swaps in fused kernels with the Triton backend
        # Kept in float32 and out of the state dict, whatever dtype the weights take.
        self.inv_freq = rope_inverse_frequencies(config)

    # ANCHOR: model_forward
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] of a packed batch; writes each token's K/V."""
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        cos, sin = rope_cos_sin(self.config, positions, self.inv_freq)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, kv_cache, meta, self.backend, self.ops)
        return self.ops.rms_norm(x, self.model.norm.weight, self.model.norm.eps)[0]

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits in float32 for the rows whose next token we sample."""
        return self.lm_head(hidden).float()
    # ANCHOR_END: model_forward
