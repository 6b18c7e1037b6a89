"""The fast CPU attention backend: the whole step in a few batched calls per layer.

`TorchAttentionBackend` (attention.py) loops over sequences in Python in
every layer and recomputes each sequence's context slots every time; with 30
layers and 32 sequences that is ~1,000 small attention calls per step. This
backend does the same maths with no Python loop over sequences:

- Once per step (the first layer to see a new `AttentionMetadata`) it builds
  a `StepPlan`: for every sequence, which pieces of the cache hold its
  context (padded into one index tensor), an additive mask (0 where a query
  may see a key, -inf elsewhere) and where its queries sit in the packed
  batch. Every layer of the step reuses it.
- Per layer it writes the new K/V, gathers the context K/V of a group of
  sequences with one `index_select` per tensor, and calls
  `scaled_dot_product_attention` once per group.

Three things make it fast on a CPU, each measured (book/src/ch05_performance.md):

- Gather whole pieces of blocks, not slots. A slot's K is 768 bytes for
  SmolLM2; 16 slots of a block sit next to each other, so one index fetches
  16 of them. (Padding up to the piece's end is masked out.)
- Decode rows (one query each) are sorted by context length and cut into
  groups where that saves more padded keys than another call costs (every
  row of a group is padded to the group's longest context), and small
  enough that the group's K and V stay in cache while SDPA reads them. Prefill/extend
  chunks get groups of their own, one per chunk length, so a 512-token chunk
  pads neither decode rows nor a 32-token chunk to 512 queries.
- The mask is float and made once per step. A bool mask is converted to a
  float one inside every SDPA call, and for decode rows the mask broadcasts
  over the query heads instead of being repeated for them.

Grouped-query attention costs no copy of K/V: the `group` query heads that
read one KV head are folded into the query-length dimension, so K and V are
used at num_kv_heads as they are stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from miniyaie.model.attention import AttentionMetadata

PIECE_SLOTS = 16  # slots fetched by one gather index (fewer when the block size is not a multiple)
# One more group costs ~40 us per layer; a padded key 0.2-1 us (one thread, SmolLM2 shapes): 40 to 200 keys.
CALL_COST_IN_SLOTS = 128
# A group's gathered K and V stay in the core's cache while SDPA reads them: capping a decode group at
# ~1,000 keys of SmolLM2 ran 30 layers up to 2.5x faster than one group of 32 rows of ~560 keys.
MAX_GROUP_BYTES = 3 * 2**19


@dataclass
class _Group:
    """Sequences attended in one SDPA call: queries padded to `max_query`, keys to whole pieces."""

    query_rows: torch.Tensor  # [n, max_query] rows of the packed batch (padding points at row 0)
    pieces: torch.Tensor  # [n, num_pieces] cache pieces holding the context, in order (padding: piece 0)
    bias: torch.Tensor  # [n, 1, max_query, num_pieces * piece] float: 0 where the key is visible, -inf elsewhere
    out_rows: torch.Tensor  # rows of the packed batch that the real queries fill...
    valid_rows: torch.Tensor  # ...and where they are among the group's n * max_query padded rows
    _bias_by_group: dict[int, torch.Tensor] = field(default_factory=dict)

    def bias_for(self, group: int) -> torch.Tensor:
        """The mask for queries folded with their `group` heads (made once; decode rows just broadcast)."""
        if self.bias.shape[2] == 1:
            return self.bias
        if group not in self._bias_by_group:
            self._bias_by_group[group] = self.bias.repeat_interleave(group, dim=2)
        return self._bias_by_group[group]


@dataclass
class StepPlan:
    """Everything about a step's attention that does not depend on the layer."""

    piece: int  # slots per gathered piece
    groups: list[_Group]  # decode rows in groups of similar context length, then the chunks


def _build_group(meta: AttentionMetadata, seqs: list[int], starts: list[int], piece: int, device) -> _Group:
    query_lens = torch.tensor([meta.query_lens[s] for s in seqs], dtype=torch.int64, device=device)
    seq_lens = torch.tensor([meta.seq_lens[s] for s in seqs], dtype=torch.int64, device=device)
    first_rows = torch.tensor([starts[s] for s in seqs], dtype=torch.int64, device=device)
    max_query, max_context = int(query_lens.max()), int(seq_lens.max())

    q_index = torch.arange(max_query, device=device)
    query_valid = q_index[None, :] < query_lens[:, None]
    query_rows = torch.where(query_valid, first_rows[:, None] + q_index[None, :], 0)

    # Piece j of a sequence holds its positions j*piece .. (j+1)*piece-1: block (j*piece) // bs, at
    # offset (j*piece) % bs, which is piece (block * bs + offset) // piece of the whole cache.
    bs = meta.block_size
    num_pieces = -(-max_context // piece)
    piece_pos = torch.arange(num_pieces, device=device) * piece
    needed_blocks = -(-max_context // bs)
    if meta.block_tables.shape[1] < needed_blocks:  # the memory gave fewer blocks than the context needs: say so
        raise ValueError("block_tables has fewer blocks than the longest sequence needs")
    blocks = meta.block_tables[seqs][:, piece_pos // bs]
    pieces = (blocks * bs + piece_pos % bs) // piece
    pieces = torch.where(piece_pos[None, :] < seq_lens[:, None], pieces, 0)

    # Query i of a sequence sits at position seq_len - query_len + i and sees keys up to it.
    k_index = torch.arange(num_pieces * piece, device=device)
    query_pos = (seq_lens - query_lens)[:, None] + q_index[None, :]
    visible = (k_index[None, None, :] <= query_pos[:, :, None]) & (k_index[None, None, :] < seq_lens[:, None, None])
    visible[:, :, 0] = True  # padded query rows see key 0 too, so no row is all -inf (NaN)
    bias = torch.zeros(visible.shape, device=device).masked_fill_(~visible, float("-inf"))
    valid_rows = query_valid.flatten().nonzero().flatten()
    return _Group(query_rows, pieces, bias[:, None], query_rows.flatten()[valid_rows], valid_rows)


def plan_step(
    meta: AttentionMetadata, device: torch.device | str, key_bytes: int, call_cost: int = CALL_COST_IN_SLOTS,
    max_group_bytes: int = MAX_GROUP_BYTES, with_decode: bool = True,
) -> StepPlan:
    """The layer-independent part of a step's attention (see the module docstring).

    `key_bytes`: the K and V of one key in one layer, which sets how many keys a decode group may hold.
    `with_decode=False` leaves the decode rows out (a backend that attends them another way).
    """
    starts, row = [], 0
    for n in meta.query_lens:
        starts.append(row)
        row += n
    piece = math.gcd(meta.block_size, PIECE_SLOTS)
    decode = sorted((s for s, n in enumerate(meta.query_lens) if n == 1 and with_decode), key=lambda s: meta.seq_lens[s])
    # ANCHOR: chunks_by_length
    # Chunks of the same length share a call (a group of requests that extend one cached prefix);
    # a chunk of another length gets its own: padding a 32-token chunk to a 512-token one's
    # queries and keys made the shared-prefix workload's prefill steps ten times the work.
    by_length: dict[int, list[int]] = {}
    for s in sorted((s for s, n in enumerate(meta.query_lens) if n > 1), key=lambda s: meta.seq_lens[s]):
        by_length.setdefault(meta.query_lens[s], []).append(s)
    # ANCHOR_END: chunks_by_length
    padded = [-(-meta.seq_lens[s] // piece) * piece for s in decode]
    runs = split_by_length(padded, call_cost, max(1, max_group_bytes // key_bytes))
    groups = [decode[a:b] for a, b in runs] + list(by_length.values())
    return StepPlan(piece, [_build_group(meta, seqs, starts, piece, device) for seqs in groups if seqs])


# ANCHOR: split_by_length
def split_by_length(lengths: list[int], call_cost: int, max_keys: int) -> list[tuple[int, int]]:
    """Cut sorted `lengths` into runs [a, b) that minimise padded keys + call_cost per run,
    each run holding at most `max_keys` padded keys unless it is a single row.

    Every row of a run is padded to the run's last (longest) length, so one
    run of lengths 30..400 gathers 400 keys for each row. Dynamic programming
    over where the last run starts: best[b] = min over a of best[a] + cost(a, b).
    """
    best, start = [0] + [math.inf] * len(lengths), [0] * (len(lengths) + 1)
    for b in range(1, len(lengths) + 1):
        for a in range(b):
            if b - a > 1 and (b - a) * lengths[b - 1] > max_keys:
                continue
            cost = best[a] + (b - a) * lengths[b - 1] + call_cost
            if cost < best[b]:
                best[b], start[b] = cost, a
    runs, b = [], len(lengths)
    while b > 0:
        runs.append((start[b], b))
        b = start[b]
    return runs[::-1]
# ANCHOR_END: split_by_length


# ANCHOR: attend
def _attend(group: _Group, piece: int, q, k_cache, v_cache, scale: float) -> torch.Tensor:
    """Outputs [n * max_query, num_heads, head_dim] of one group, padded query rows included."""
    n, max_query = group.query_rows.shape
    context = group.pieces.shape[1] * piece
    _, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    g = num_heads // num_kv_heads
    # [n, max_query, kv, g, d] -> [n, kv, max_query * g, d]: a KV head's g query heads become extra rows.
    queries = q.index_select(0, group.query_rows.flatten()).view(n, max_query, num_kv_heads, g, head_dim)
    queries = queries.permute(0, 2, 1, 3, 4).reshape(n, num_kv_heads, max_query * g, head_dim)
    # The cache seen as pieces of `piece` consecutive slots: one index fetches a whole piece.
    pieces = group.pieces.flatten()
    keys = k_cache.view(-1, piece * num_kv_heads * head_dim).index_select(0, pieces)
    values = v_cache.view(-1, piece * num_kv_heads * head_dim).index_select(0, pieces)
    keys = keys.view(n, context, num_kv_heads, head_dim).transpose(1, 2).to(q.dtype)
    values = values.view(n, context, num_kv_heads, head_dim).transpose(1, 2).to(q.dtype)
    out = F.scaled_dot_product_attention(queries, keys, values, attn_mask=group.bias_for(g).to(q.dtype), scale=scale)
    return out.view(n, num_kv_heads, max_query, g, head_dim).permute(0, 2, 1, 3, 4).reshape(n * max_query, num_heads, head_dim)
# ANCHOR_END: attend


class BatchedTorchAttentionBackend:
    """Same results as `TorchAttentionBackend`, one batched call per group of rows per layer."""

    def __init__(self, call_cost_in_slots: int = CALL_COST_IN_SLOTS, max_group_bytes: int = MAX_GROUP_BYTES):
        self.call_cost_in_slots = call_cost_in_slots  # see split_by_length (0: a group per distinct length)
        self.max_group_bytes = max_group_bytes
        self._meta: AttentionMetadata | None = None
        self._plan: StepPlan | None = None
        self.num_plans = 0  # steps planned: one per step, however many layers (a test checks it)

    def plan(self, meta: AttentionMetadata, k_cache: torch.Tensor, with_decode: bool = True) -> StepPlan:
        """The step's plan, built by its first layer (with_decode=False: see plan_step)."""
        if meta is not self._meta:
            key_bytes = 2 * k_cache[0].numel() * k_cache.element_size()  # K and V of one key in one layer
            self._meta = meta
            self._plan = plan_step(meta, k_cache.device, key_bytes, self.call_cost_in_slots, self.max_group_bytes,
                                   with_decode)
            self.num_plans += 1
        return self._plan

    def forward(self, q, k, v, k_cache, v_cache, meta: AttentionMetadata, scale: float) -> torch.Tensor:
        k_cache.index_copy_(0, meta.slot_mapping, k.to(k_cache.dtype))
        v_cache.index_copy_(0, meta.slot_mapping, v.to(v_cache.dtype))
        plan = self.plan(meta, k_cache)
        out = torch.empty_like(q)
        for group in plan.groups:
            result = _attend(group, plan.piece, q, k_cache, v_cache, scale)
            out.index_copy_(0, group.out_rows, result.index_select(0, group.valid_rows))
        return out
