"""The fast CPU attention backend: the whole step in two batched calls per layer.

`TorchAttentionBackend` (attention.py) loops over sequences in Python in
every layer and recomputes each sequence's context slots every time; with 30
layers and 32 sequences that is ~1,000 small attention calls per step. This
backend does the same maths with no Python loop over sequences:

- Once per step (the first layer to see a new `AttentionMetadata`) it builds
  a `StepPlan`: the context slots of every sequence padded into one
  [num_seqs, max_context] index tensor, the mask of what each query row may
  see, and where each sequence's queries sit in the packed batch. Every
  layer of the step reuses it.
- Per layer it writes the new K/V, gathers the context K/V of all sequences
  with one index (padding reads slot 0 and is masked out), and calls
  `scaled_dot_product_attention` for the decode rows (one query each, in at
  most two groups of similar context length, as padding to the longest
  context is gathered too) and once for the prefill/extend chunks (queries
  padded to the longest). Splitting decode from chunks keeps a 512-token
  chunk from padding 63 decode rows to 512 queries each.

Grouped-query attention costs no copy of K/V: the `group` query heads that
read one KV head are folded into the query-length dimension, so K and V are
used at num_kv_heads as they are stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from miniyaie.model.attention import AttentionMetadata


@dataclass
class _Group:
    """Sequences attended in one SDPA call: queries padded to `max_query`, keys to `max_context`."""

    query_rows: torch.Tensor  # [n, max_query] rows of the packed batch (padding points at row 0)
    query_valid: torch.Tensor  # [n, max_query] bool: which of those rows are real
    context_slots: torch.Tensor  # [n, max_context] cache slots (padding points at slot 0)
    mask: torch.Tensor  # [n, 1, max_query, max_context] bool: key visible to query
    out_rows: torch.Tensor  # rows of the packed batch that the real queries fill...
    valid_rows: torch.Tensor  # ...and where they are among the group's n * max_query padded rows
    _mask_by_group: dict[int, torch.Tensor] = field(default_factory=dict)

    def mask_for(self, group: int) -> torch.Tensor:
        """The mask with each query row repeated for the `group` query heads of a KV head (made once)."""
        if group not in self._mask_by_group:
            self._mask_by_group[group] = self.mask.repeat_interleave(group, dim=2)
        return self._mask_by_group[group]


@dataclass
class StepPlan:
    """Everything about a step's attention that does not depend on the layer."""

    groups: list[_Group]  # decode rows (one new token each), in up to two length buckets, then chunks


def _build_group(meta: AttentionMetadata, seqs: list[int], starts: list[int], device) -> _Group:
    query_lens = torch.tensor([meta.query_lens[s] for s in seqs], dtype=torch.int64, device=device)
    seq_lens = torch.tensor([meta.seq_lens[s] for s in seqs], dtype=torch.int64, device=device)
    first_rows = torch.tensor([starts[s] for s in seqs], dtype=torch.int64, device=device)
    max_query, max_context = int(query_lens.max()), int(seq_lens.max())

    q_index = torch.arange(max_query, device=device)
    query_valid = q_index[None, :] < query_lens[:, None]
    query_rows = torch.where(query_valid, first_rows[:, None] + q_index[None, :], 0)

    bs = meta.block_size
    num_blocks = -(-max_context // bs)
    tables = meta.block_tables[seqs, :num_blocks]
    if tables.shape[1] < num_blocks:  # the memory gave fewer blocks than the context needs: say so, not a shape error
        raise ValueError("block_tables has fewer blocks than the longest sequence needs")
    slots = (tables[:, :, None] * bs + torch.arange(bs, device=device)).flatten(1)[:, :max_context]
    k_index = torch.arange(max_context, device=device)
    key_valid = k_index[None, :] < seq_lens[:, None]
    context_slots = torch.where(key_valid, slots, 0)

    # Query i of a sequence sits at position seq_len - query_len + i and sees keys up to it.
    query_pos = (seq_lens - query_lens)[:, None] + q_index[None, :]
    mask = (k_index[None, None, :] <= query_pos[:, :, None]) & key_valid[:, None, :]
    mask[:, :, 0] = True  # every real query sees key 0; padded query rows too, so none is all -inf (NaN)
    valid_rows = query_valid.flatten().nonzero().flatten()
    return _Group(query_rows, query_valid, context_slots, mask[:, None], query_rows.flatten()[valid_rows], valid_rows)


def plan_step(meta: AttentionMetadata, device: torch.device | str) -> StepPlan:
    """The layer-independent part of a step's attention (see the module docstring)."""
    starts, row = [], 0
    for n in meta.query_lens:
        starts.append(row)
        row += n
    decode = sorted((s for s, n in enumerate(meta.query_lens) if n == 1), key=lambda s: meta.seq_lens[s])
    extend = [s for s, n in enumerate(meta.query_lens) if n > 1]
    buckets = _split_by_length(decode, [meta.seq_lens[s] for s in decode]) + [extend]
    return StepPlan([_build_group(meta, seqs, starts, device) for seqs in buckets if seqs])


def _split_by_length(seqs: list[int], lens: list[int]) -> list[list[int]]:
    """Sequences sorted by length, cut in two where that gathers the fewest padded slots.

    Every sequence of a group is padded to the group's longest context, so
    one group of lengths 30..400 gathers 400 slots for each; two groups
    roughly halve the waste for one more SDPA call per layer.
    """
    if len(seqs) < 2:
        return [seqs]
    n = len(seqs)
    cost, cut = min((i * lens[i - 1] + (n - i) * lens[-1], i) for i in range(1, n))
    if cost > 0.8 * n * lens[-1]:  # not worth one more call per layer
        return [seqs]
    return [seqs[:cut], seqs[cut:]]


# ANCHOR: attend
def _attend(group: _Group, q, k_cache, v_cache, scale: float) -> torch.Tensor:
    """Outputs [n * max_query, num_heads, head_dim] of one group, padded query rows included."""
    n, max_query = group.query_rows.shape
    max_context = group.context_slots.shape[1]
    _, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    g = num_heads // num_kv_heads
    # [n, max_query, kv, g, d] -> [n, kv, max_query * g, d]: a KV head's g query heads become extra rows.
    queries = q.index_select(0, group.query_rows.flatten()).view(n, max_query, num_kv_heads, g, head_dim)
    queries = queries.permute(0, 2, 1, 3, 4).reshape(n, num_kv_heads, max_query * g, head_dim)
    # index_select, not k_cache[slots]: measured ~2.5x faster on CPU for the same gather.
    slots = group.context_slots.flatten()
    keys = k_cache.index_select(0, slots).view(n, max_context, num_kv_heads, head_dim).transpose(1, 2)
    values = v_cache.index_select(0, slots).view(n, max_context, num_kv_heads, head_dim).transpose(1, 2)
    out = F.scaled_dot_product_attention(queries, keys.to(q.dtype), values.to(q.dtype), attn_mask=group.mask_for(g), scale=scale)
    return out.view(n, num_kv_heads, max_query, g, head_dim).permute(0, 2, 1, 3, 4).reshape(n * max_query, num_heads, head_dim)
# ANCHOR_END: attend


class BatchedTorchAttentionBackend:
    """Same results as `TorchAttentionBackend`, one batched call per kind of row per layer."""

    def __init__(self):
        self._meta: AttentionMetadata | None = None
        self._plan: StepPlan | None = None
        self.num_plans = 0  # steps planned: one per step, however many layers (a test checks it)

    def plan(self, meta: AttentionMetadata, device) -> StepPlan:
        if meta is not self._meta:
            self._meta, self._plan = meta, plan_step(meta, device)
            self.num_plans += 1
        return self._plan

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        k_cache.index_copy_(0, meta.slot_mapping, k.to(k_cache.dtype))
        v_cache.index_copy_(0, meta.slot_mapping, v.to(v_cache.dtype))
        plan = self.plan(meta, q.device)
        out = torch.empty_like(q)
        for group in plan.groups:
            result = _attend(group, q, k_cache, v_cache, scale)
            out.index_copy_(0, group.out_rows, result.index_select(0, group.valid_rows))
        return out
