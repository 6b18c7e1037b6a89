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


# ANCHOR: decoder
class RMSNorm(nn.Module):
    """The checkpoint's norms: one learned `weight` of `size` numbers (it starts at ones), and eps."""

    def __init__(self, size: int, eps: float):
        super().__init__()
        # Idea: what must the weight be for the checkpoint to load into it?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    """The checkpoint's `self_attn`: nn.Linear q_proj, k_proj, v_proj, o_proj, and with
    config.qk_norm RMSNorm q_norm, k_norm; shapes and biases such that the
    checkpoint's tensors load as they are (strictly: nothing missing, nothing extra)."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        self.config, self.layer_index = config, layer_index
        self.scale = config.head_dim**-0.5
        # Idea: with grouped-query attention, which projections are narrower, and which flag gives which one a bias?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    # ANCHOR: attention_forward
    def forward(self, x, cos, sin, kv_cache: KVCache, meta: AttentionMetadata, backend: AttentionBackend, ops: LayerOps):
        """Self-attention of this layer for a packed batch: [num_tokens, hidden] in, [num_tokens, hidden] out.

        Writes the step's K and V into this layer's part of `kv_cache` (rows
        `meta.slot_mapping`) and attends through `backend`, which does both.
        cos, sin: [num_tokens, head_dim], the rotation of every token's position.
        Heads, head_dim and features come from `self.config` (chapter 7 builds a
        layer with a rank's share of the heads). The q, k and v projections run
        through `ops.project`, which may hand back views of one merged matmul,
        and the rotation through `ops.rotary`; with config.qk_norm (Qwen3) the
        layer's q_norm and k_norm modules take part where the chapter's
        overview puts them (called as modules: ops.rms_norm is for the
        layer's two norms of the residual stream). Every projection is called
        as a module, never read as a weight (other backends and chapter 7 swap
        the modules).
        """
        # Idea: which tensors must have a heads dimension, and which shape does the backend give back?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')
    # ANCHOR_END: attention_forward


class MLP(nn.Module):
    """The checkpoint's `mlp`: nn.Linear gate_proj, up_proj, down_proj (bias: config.mlp_bias)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        # Idea: which two projections widen, and which one narrows?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    def forward(self, x: torch.Tensor, ops: LayerOps) -> torch.Tensor:
        return ops.swiglu(x, self.gate_proj, self.up_proj, self.down_proj)


class DecoderLayer(nn.Module):
    """The checkpoint's `layers.i`: input_layernorm, self_attn, post_attention_layernorm, mlp."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        # Idea: the checkpoint names four children here: what does each need from config, and which needs its index?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    # ANCHOR: decoder_layer
    def forward(self, x, cos, sin, kv_cache, meta, backend, ops: LayerOps):
        """One pre-norm decoder layer (the chapter's overview): the residual stream [num_tokens, hidden] in, the same shape out.

        Its norms are input_layernorm (before attention) and
        post_attention_layernorm (before the MLP); they run through
        `ops.rms_norm` (LayerOps: it can add a residual in the same call),
        the MLP through `self.mlp(h, ops)`.
        """
        # Idea: what does each block add to, and what does it read?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')
    # ANCHOR_END: decoder_layer


class DecoderModel(nn.Module):
    """The checkpoint's `model`: embed_tokens (nn.Embedding), layers (nn.ModuleList), norm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        # Idea: how does a layer learn which part of the cache is its own?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')


class CausalLM(nn.Module):
    """The whole model: token ids in, next-token logits out, K/V kept in the cache.

    Modules: `model` (DecoderModel) and `lm_head` (nn.Linear, no bias), named
    as in the checkpoint. With config.tie_word_embeddings the checkpoint has
    no lm_head.weight: lm_head and the embedding share one Parameter (the
    same tensor, so that loading the embedding sets both).
    """

    def __init__(self, config: ModelConfig, backend: AttentionBackend | None = None):
        super().__init__()
        self.config = config
        # Idea: what does "tied" mean for the object lm_head.weight is?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')
        self.backend = backend or TorchAttentionBackend()
        self.ops = LayerOps()  # the engine swaps in fused kernels with the Triton backend
        # Kept in float32 and out of the state dict, whatever dtype the weights take.
        self.inv_freq = rope_inverse_frequencies(config)

    # ANCHOR: model_forward
    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_cache: KVCache, meta: AttentionMetadata) -> torch.Tensor:
        """Hidden states [num_tokens, hidden] of a packed batch, final norm applied; writes each token's K/V.

        input_ids, positions: [num_tokens] (int64); positions[t] is token t's
        place in its own sequence (0 for a prompt's first token), so that
        the tokens of a decode step continue where their sequences stopped.
        After the call, every layer's K/V of every token sit in `kv_cache` at
        meta.slot_mapping. Uses self.backend for attention and self.ops for
        the norms, rotation and MLP; calls the embedding as a module (chapter
        7 swaps in a vocabulary-parallel one). self.inv_freq holds the
        rotation speeds (rope_cos_sin turns them into cos and sin).
        """
        if self.inv_freq.device != positions.device:
            self.inv_freq = self.inv_freq.to(positions.device)
        # Idea: what do all the layers of one step share, and what is computed once for all of them?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits [rows, vocab_size] in float32 of the given rows, through the lm_head module."""
        # Idea: which module maps hidden states to the vocabulary, and in which dtype do logits leave?
        # Stuck? `miniyaie hint 0.3` prints hints, one level at a time.
        # TODO(Task 0.3): The decoder and its forward over the cache. Replace this line with your code.
        raise NotImplementedError('Chapter 0, Task 3: The decoder and its forward over the cache — see book/src/ch00_model.md')
    # ANCHOR_END: model_forward
# ANCHOR_END: decoder
