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
        # Nudge: what must the weight be for the checkpoint to load into it?
        # Hint 1: A Parameter, so that load_state_dict finds it and model.to(dtype) converts it.
        # Hint 2: self.weight = nn.Parameter of `size` ones; keep eps.
        # Hint 3:
        #   self.weight = Parameter(ones(size)); self.eps = eps
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps
        # END SOLUTION

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
        # Nudge: with grouped-query attention, which projections are narrower, and which flag gives which one a bias?
        # Hint 1: nn.Linear(in, out) holds a weight [out, in]. Queries have num_heads heads, keys and
        #   values num_kv_heads (fewer with GQA), each of head_dim numbers, which need not be
        #   hidden_size / num_heads (Qwen3). config.qkv_bias, o_bias and qk_norm say which extras exist;
        #   Qwen3's norms act on one head, not on the whole hidden vector.
        # Hint 2: q_proj: hidden -> heads * head_dim; k_proj, v_proj: hidden -> kv_heads * head_dim,
        #   all three with bias=qkv_bias; o_proj: heads * head_dim -> hidden with bias=o_bias; with
        #   qk_norm, q_norm and k_norm are RMSNorm(head_dim, rms_norm_eps).
        # Hint 3:
        #   q_proj = Linear(hidden, heads * head_dim, bias=qkv_bias); k_proj, v_proj with kv_heads
        #   o_proj = Linear(heads * head_dim, hidden, bias=o_bias)
        #   if qk_norm: q_norm = RMSNorm(head_dim, eps); k_norm = RMSNorm(head_dim, eps)
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        heads, kv_heads, head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_proj = nn.Linear(config.hidden_size, heads * head_dim, bias=config.qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_heads * head_dim, bias=config.qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_heads * head_dim, bias=config.qkv_bias)
        self.o_proj = nn.Linear(heads * head_dim, config.hidden_size, bias=config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(head_dim, config.rms_norm_eps)
        # END SOLUTION

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
        # Nudge: which tensors must have a heads dimension, and which shape does the backend give back?
        # Hint 1: The projections give flat rows; the backend and the rotation work per head, with
        #   num_heads query heads and num_kv_heads K/V heads of head_dim each. Qwen3 normalises q and
        #   k per head, which only makes sense once the heads are split out.
        #   The backend returns one row per token per query head; o_proj wants them flat again.
        # Hint 2: Project x to q, k, v with ops.project; view them as [num_tokens, heads, head_dim]
        #   (q with num_heads, k and v with num_kv_heads: view, since they may be slices of one
        #   tensor); with config.qk_norm apply self.q_norm and self.k_norm; rotate q and k with
        #   ops.rotary; take this layer's k_cache, v_cache from kv_cache.layer(self.layer_index);
        #   call backend.forward with self.scale; flatten the heads and apply o_proj.
        # Hint 3:
        #   q, k, v = ops.project(x, q_proj, k_proj, v_proj)
        #   q = q.view(-1, num_heads, head_dim); k, v = .view(-1, num_kv_heads, head_dim)
        #   if qk_norm: q, k = q_norm(q), k_norm(k)
        #   q, k = ops.rotary(q, k, cos, sin)
        #   k_cache, v_cache = kv_cache.layer(layer_index)
        #   out = backend.forward(q, k, v, k_cache, v_cache, meta, scale)
        #   return o_proj(out.reshape(-1, num_heads * head_dim))
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
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
        # END SOLUTION
    # ANCHOR_END: attention_forward


class MLP(nn.Module):
    """The checkpoint's `mlp`: nn.Linear gate_proj, up_proj, down_proj (bias: config.mlp_bias)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        # Nudge: which two projections widen, and which one narrows?
        # Hint 1: SwiGLU widens x twice (gate and up) to intermediate_size and narrows the product back.
        # Hint 2: gate_proj and up_proj: hidden -> intermediate; down_proj: intermediate -> hidden; bias=mlp_bias.
        # Hint 3:
        #   gate_proj, up_proj = Linear(hidden, intermediate, bias=mlp_bias) each
        #   down_proj = Linear(intermediate, hidden, bias=mlp_bias)
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        # END SOLUTION

    def forward(self, x: torch.Tensor, ops: LayerOps) -> torch.Tensor:
        return ops.swiglu(x, self.gate_proj, self.up_proj, self.down_proj)


class DecoderLayer(nn.Module):
    """The checkpoint's `layers.i`: input_layernorm, self_attn, post_attention_layernorm, mlp."""

    def __init__(self, config: ModelConfig, layer_index: int):
        super().__init__()
        # Nudge: the checkpoint names four children here: what does each need from config, and which needs its index?
        # Hint 1: Both norms of a layer normalise the residual stream, hidden_size wide; the
        #   attention needs its layer's index to find its part of the KV cache.
        # Hint 2: Two RMSNorm(hidden_size, rms_norm_eps), an Attention(config, layer_index), an MLP(config).
        # Hint 3:
        #   input_layernorm = RMSNorm(hidden, eps); self_attn = Attention(config, layer_index)
        #   post_attention_layernorm = RMSNorm(hidden, eps); mlp = MLP(config)
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_index)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)
        # END SOLUTION

    # ANCHOR: decoder_layer
    def forward(self, x, cos, sin, kv_cache, meta, backend, ops: LayerOps):
        """One pre-norm decoder layer (the chapter's overview): the residual stream [num_tokens, hidden] in, the same shape out.

        Its norms are input_layernorm (before attention) and
        post_attention_layernorm (before the MLP); they run through
        `ops.rms_norm` (LayerOps: it can add a residual in the same call),
        the MLP through `self.mlp(h, ops)`.
        """
        # Nudge: what does each block add to, and what does it read?
        # Hint 1: Pre-norm: the residual stream x is never normalised in place. Each block reads
        #   rms_norm(x) and its output is added to x. ops.rms_norm(h, w, eps, residual=x) returns
        #   (rms_norm(h + x), h + x): the add and the next norm in one call.
        # Hint 2: Normalise x with input_layernorm's weight and eps; run self_attn on it; add the
        #   attention output to x and normalise the sum with post_attention_layernorm (one
        #   ops.rms_norm call with residual=x gives both); return the sum plus the MLP of the
        #   normalised sum.
        # Hint 3:
        #   normed, _ = ops.rms_norm(x, input_layernorm.weight, input_layernorm.eps)
        #   h = self_attn(normed, cos, sin, kv_cache, meta, backend, ops)
        #   h, x = ops.rms_norm(h, post_attention_layernorm.weight, .eps, residual=x)   # h = norm(x + attn), x = x + attn
        #   return x + mlp(h, ops)
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        normed, _ = ops.rms_norm(x, self.input_layernorm.weight, self.input_layernorm.eps)
        h = self.self_attn(normed, cos, sin, kv_cache, meta, backend, ops)
        h, x = ops.rms_norm(h, self.post_attention_layernorm.weight, self.post_attention_layernorm.eps, residual=x)
        return x + self.mlp(h, ops)  # above: x = x + attention, h = its norm (one fused op)
        # END SOLUTION
    # ANCHOR_END: decoder_layer


class DecoderModel(nn.Module):
    """The checkpoint's `model`: embed_tokens (nn.Embedding), layers (nn.ModuleList), norm."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        # Nudge: how does a layer learn which part of the cache is its own?
        # Hint 1: One embedding row per vocabulary entry; num_layers layers, each told its index; a final norm.
        # Hint 2: nn.Embedding(vocab, hidden); a ModuleList of DecoderLayer(config, i) for i in
        #   range(num_layers); RMSNorm(hidden, eps).
        # Hint 3:
        #   embed_tokens = Embedding(vocab, hidden)
        #   layers = ModuleList(DecoderLayer(config, i) for i in range(num_layers)); norm = RMSNorm(hidden, eps)
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        # END SOLUTION


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
        # Nudge: what does "tied" mean for the object lm_head.weight is?
        # Hint 1: A tied head is not a copy of the embedding: it is the same Parameter, so that one
        #   tensor in memory (and in the checkpoint) serves both. An embedding [vocab, hidden] has
        #   exactly the shape of a Linear(hidden, vocab)'s weight.
        # Hint 2: Build DecoderModel(config); lm_head = Linear(hidden, vocab, bias=False); when
        #   tie_word_embeddings, assign the embedding's weight Parameter to lm_head.weight.
        # Hint 3:
        #   model = DecoderModel(config); lm_head = Linear(hidden, vocab, bias=False)
        #   if tie_word_embeddings: lm_head.weight = model.embed_tokens.weight
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        self.model = DecoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        # END SOLUTION
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
        # Nudge: what do all the layers of one step share, and what is computed once for all of them?
        # Hint 1: The rotation angles depend only on the positions, not on the layer: compute cos and
        #   sin once per step. Token ids become vectors through the embedding module; every layer
        #   transforms the stream in order; the model's final RMSNorm (self.model.norm) comes last.
        # Hint 2: cos, sin = rope_cos_sin(config, positions, inv_freq); x = embed_tokens(input_ids);
        #   pass x through every layer of self.model.layers with cos, sin, the cache, the metadata,
        #   self.backend and self.ops; return the first element of ops.rms_norm with the final
        #   norm's weight and eps.
        # Hint 3:
        #   cos, sin = rope_cos_sin(config, positions, inv_freq)
        #   x = model.embed_tokens(input_ids)
        #   for layer in model.layers: x = layer(x, cos, sin, kv_cache, meta, backend, ops)
        #   return ops.rms_norm(x, model.norm.weight, model.norm.eps)[0]
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        cos, sin = rope_cos_sin(self.config, positions, self.inv_freq)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, kv_cache, meta, self.backend, self.ops)
        return self.ops.rms_norm(x, self.model.norm.weight, self.model.norm.eps)[0]
        # END SOLUTION

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits [rows, vocab_size] in float32 of the given rows, through the lm_head module."""
        # Nudge: which module maps hidden states to the vocabulary, and in which dtype do logits leave?
        # Hint 1: The LM head is a linear map from hidden_size to the vocabulary (tied or not to the
        #   embedding, it is self.lm_head). Sampling wants float32 whatever the model's dtype.
        # Hint 2: Apply self.lm_head to hidden and convert the result to float32.
        # Hint 3:
        #   return lm_head(hidden).float()
        # BEGIN SOLUTION 0.3: The decoder and its forward over the cache
        return self.lm_head(hidden).float()
        # END SOLUTION
    # ANCHOR_END: model_forward
# ANCHOR_END: decoder
