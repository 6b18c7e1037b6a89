"""What bounds a step: the bytes it moves, the FLOPs it does, and the roofline of a machine (Task 5.16).

One step of the engine is one forward pass over a packed batch. Its cost
has two sides: the bytes that must come from memory (the weights, and the
K/V of every sequence's context) and the arithmetic done on them. A
machine moves `bytes_per_s` and computes `flops_per_s`; whichever side
takes longer bounds the step, and that longer time is the roofline's
prediction. `miniyaie bench offline` prints it for its decode steps next
to their measured time (bench/offline.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from miniyaie.model import ModelConfig


@dataclass(frozen=True)
class SeqStep:
    """One sequence's part of a step."""

    new_tokens: int  # tokens computed this step (a decode: 1)
    context: int  # tokens already in the KV cache before the step
    samples: bool = True  # whether its last new token goes through the LM head (a prompt chunk short of its end does not)

    def __post_init__(self):
        if self.new_tokens < 1 or self.context < 0:
            raise ValueError(f"a sequence computes at least 1 token at a context >= 0, got {self.new_tokens} at {self.context}")


@dataclass(frozen=True)
class Machine:
    """What a machine moves and computes per second (measured, or from its data sheet)."""

    bytes_per_s: float
    flops_per_s: float
    name: str = ""

    def __post_init__(self):
        if not (self.bytes_per_s > 0 and self.flops_per_s > 0):
            raise ValueError(f"a machine's bandwidth and FLOP/s are > 0, got {self.bytes_per_s} and {self.flops_per_s}")


@dataclass(frozen=True)
class StepCost:
    weight_bytes: int  # parameters read from memory
    kv_read_bytes: int  # K and V read by attention
    kv_write_bytes: int  # K and V of the new tokens written to the cache
    flops: int  # matmul FLOPs (2 per multiply-add)

    @property
    def bytes(self) -> int:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved: compare it with the machine's flops_per_s / bytes_per_s."""
        return self.flops / self.bytes


@dataclass(frozen=True)
class Roofline:
    memory_s: float  # the step's bytes at the machine's bandwidth
    compute_s: float  # the step's FLOPs at the machine's peak
    seconds: float  # what the roofline predicts for the step
    bound: str  # "memory" or "compute"


# ANCHOR: step_cost
def step_cost(config: ModelConfig, seqs: Sequence[SeqStep], weight_dtype_bytes: int = 2, kv_dtype_bytes: int = 2) -> StepCost:
    """The bytes and FLOPs of one forward pass over `seqs` (one SeqStep per sequence of the batch).

    The model is chapter 0's CausalLM with `config`, its parameters stored in
    `weight_dtype_bytes` bytes each and its KV cache in `kv_dtype_bytes`.
    What is counted is what the step touches, once per step:
    - weight_bytes: every parameter of every decoder layer and the final norm;
      the embedding table only for the rows the step looks up (one row per
      token computed); the LM head only if some sequence samples, and then all
      of it. Tied embeddings are one matrix: when the LM head reads it whole,
      the rows looked up are not read again.
    - kv_read_bytes: in every layer, the K and V of every token in each
      sequence's context after the step (context + new_tokens: the new
      tokens are written, then read like the rest).
    - kv_write_bytes: in every layer, the K and V of every new token.
    - flops: 2 per multiply-add of the matmuls only: every linear layer on
      every token computed, the LM head on one row per sampling sequence, and
      attention (scores and the weighted sum of V) of every new query against
      every key of its sequence's context after the step, masked or not (the
      whole rectangle, as the reference backend computes). Norms, RoPE, SiLU,
      softmax, residual and bias adds are not counted.
    Raises ValueError for an empty step or a dtype size below 1.

    Example (asserted by the tests): SmolLM2-135M's config (30 layers, hidden
    576, tied embeddings) in bf16, one sequence decoding at context 1023:
    StepCost(weight_bytes=269_030_016, kv_read_bytes=23_592_960,
    kv_write_bytes=23_040, flops=339_738_624).
    """
    # Nudge: count what the step touches, once: the weights once per step, the K/V once per token.
    # Hint 1: Weights are read once per step whatever the batch (that is why batching decodes
    #   pays), K/V once per token of each context (that is why long contexts cost), and the
    #   FLOPs grow with the tokens. Two traps: the embedding is a gather (only the looked-up
    #   rows move), and the LM head runs only on the rows that sample; with tied embeddings it
    #   is the embedding's own matrix, read whole or as rows, never both. Attention FLOPs
    #   follow the rectangle new x (context + new), per query head; K/V bytes follow the KV
    #   heads (grouped-query attention shares them).
    # Hint 2: Per layer, list the linear layers with their (in, out) sizes and biases: q, k, v
    #   (bias if qkv_bias), o (o_bias), gate, up, down (mlp_bias), plus two norms of hidden
    #   and, with qk_norm, two of head_dim. Layer parameters times layers plus the final norm
    #   are read in full. Tokens = sum of new_tokens, sampling rows = the sequences that sample.
    #   Embedding: tokens rows of hidden; LM head: vocab x hidden if any row samples; tied and
    #   sampling: the matrix once. K/V row = num_kv_heads x head_dim values, times 2 (K and V)
    #   times layers; read over context + new of each sequence, written over new. FLOPs:
    #   2 x tokens x (linear weights per layer x layers) + 2 x rows x hidden x vocab +
    #   layers x 2 matmuls x 2 x num_heads x head_dim x sum(new x (context + new)).
    # Hint 3:
    #   check seqs non-empty, dtype sizes >= 1
    #   q, kv = heads * head_dim, kv_heads * head_dim
    #   linear = h*q + 2*h*kv + q*h + 3*h*inter                    (weights, no biases)
    #   bias = qkv_bias*(q + 2*kv) + o_bias*h + mlp_bias*(2*inter + h)
    #   norms = 2*h + qk_norm*2*head_dim
    #   tokens = sum new; rows = count samples; head = vocab*h
    #   params = layers*(linear + bias + norms) + h                   (+ the final norm)
    #   if tied: params += head if rows else tokens*h
    #   else:    params += tokens*h + (head if rows else 0)
    #   kv_row = 2 * layers * kv * kv_dtype_bytes
    #   read = kv_row * sum(context + new); write = kv_row * tokens
    #   flops = 2*tokens*layers*linear + 2*rows*head + layers*4*q*sum(new*(context + new))
    #   return StepCost(params*weight_dtype_bytes, read, write, flops)
    # BEGIN SOLUTION 5.16: What bounds a step
    if not seqs:
        raise ValueError("a step has at least one sequence")
    if weight_dtype_bytes < 1 or kv_dtype_bytes < 1:
        raise ValueError(f"dtype sizes are >= 1 byte, got {weight_dtype_bytes} and {kv_dtype_bytes}")
    c = config
    hidden, inter = c.hidden_size, c.intermediate_size
    q_width, kv_width = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    linear = hidden * q_width + 2 * hidden * kv_width + q_width * hidden + 3 * hidden * inter
    bias = c.qkv_bias * (q_width + 2 * kv_width) + c.o_bias * hidden + c.mlp_bias * (2 * inter + hidden)
    norms = 2 * hidden + c.qk_norm * 2 * c.head_dim
    tokens = sum(s.new_tokens for s in seqs)
    rows = sum(1 for s in seqs if s.samples)
    head = c.vocab_size * hidden
    params = c.num_layers * (linear + bias + norms) + hidden
    if c.tie_word_embeddings:
        params += head if rows else tokens * hidden
    else:
        params += tokens * hidden + (head if rows else 0)
    kv_row = 2 * c.num_layers * kv_width * kv_dtype_bytes
    rectangle = sum(s.new_tokens * (s.context + s.new_tokens) for s in seqs)
    flops = 2 * tokens * c.num_layers * linear + 2 * rows * head + c.num_layers * 4 * q_width * rectangle
    return StepCost(
        weight_bytes=params * weight_dtype_bytes,
        kv_read_bytes=kv_row * sum(s.context + s.new_tokens for s in seqs),
        kv_write_bytes=kv_row * tokens,
        flops=flops,
    )
    # END SOLUTION
# ANCHOR_END: step_cost


# ANCHOR: roofline
def roofline(cost: StepCost, machine: Machine) -> Roofline:
    """The roofline's time for `cost` on `machine`, and which side bounds it.

    memory_s: the step's bytes at machine.bytes_per_s; compute_s: its FLOPs at
    machine.flops_per_s. The two overlap (a kernel computes while it loads), so
    the step takes as long as the slower side: that side is the bound
    ("memory" when the two are equal). Example (asserted): 100 bytes and 1,000
    FLOPs on a machine of 10 B/s and 50 FLOP/s: Roofline(memory_s=10.0,
    compute_s=20.0, seconds=20.0, bound="compute").
    """
    # Nudge: the step waits for the slower of its two sides.
    # Hint 1: Loading and computing overlap, so their times do not add: the longer one is the
    #   step's time, and that side is what to make faster (fewer bytes: batch more decodes,
    #   smaller dtypes; fewer FLOPs: skip what a causal mask hides). A tie is memory-bound.
    # Hint 2: Divide the bytes by the bandwidth and the FLOPs by the peak; the time is the
    #   larger; the bound names it.
    # Hint 3:
    #   memory_s = cost.bytes / machine.bytes_per_s; compute_s = cost.flops / machine.flops_per_s
    #   return Roofline(memory_s, compute_s, max(both), "memory" if memory_s >= compute_s else "compute")
    # BEGIN SOLUTION 5.16: What bounds a step
    memory_s = cost.bytes / machine.bytes_per_s
    compute_s = cost.flops / machine.flops_per_s
    return Roofline(memory_s, compute_s, max(memory_s, compute_s), "memory" if memory_s >= compute_s else "compute")
    # END SOLUTION
# ANCHOR_END: roofline
