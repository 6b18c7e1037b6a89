"""Task 2.2 with the allocator of Task 2.1: K/V written through slot mappings read back through block tables.

Several sequences grow chunk by chunk in one pool; their blocks come from
one allocator, so their tables interleave in whatever order the allocator
chooses. Chapter 0's plain-torch backend writes every chunk's K/V through
the slot mapping and reads each sequence's context through its block table;
the result must equal attention over the sequence's K/V laid out
contiguously, and every token's K/V must read back exactly as written.
"""

import random

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given, settings
from hypothesis import strategies as st

from miniyaie.model import AttentionMetadata, TorchAttentionBackend
from miniyaie.paged import BlockAllocator, grow_block_table, slot_mapping

NUM_LAYERS, KV_HEADS, HEADS, HEAD_DIM = 2, 2, 4, 8


def reference_attention(q, k, v, scale):
    """SDPA over contiguous K/V, the causal mask offset by the tokens already cached."""
    num_new, context = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    mask = torch.arange(context)[None, :] <= torch.arange(context - num_new, context)[:, None]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).double(), k.transpose(0, 1).double(), v.transpose(0, 1).double(), attn_mask=mask, scale=scale
    )
    return out.transpose(0, 1)


@pytest.mark.task("2.2")
@settings(max_examples=30)
@given(
    block_size=st.sampled_from([1, 7, 16]),
    seq_lens=st.lists(st.integers(1, 36), min_size=1, max_size=4),
    spare_blocks=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
@example(block_size=1, seq_lens=[3, 1, 5], spare_blocks=0, seed=0)  # block size 1, the pool exactly full
@example(block_size=16, seq_lens=[32, 16], spare_blocks=0, seed=1)  # sequences ending exactly on block boundaries
@example(block_size=7, seq_lens=[7, 8, 13, 1], spare_blocks=2, seed=2)
def test_kv_written_through_slot_mappings_reads_back_through_block_tables(block_size, seq_lens, spare_blocks, seed):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-n // block_size) for n in seq_lens) + spare_blocks
    allocator = BlockAllocator(num_blocks)
    scattered = allocator.allocate_many(num_blocks)  # take every block, give them back in random order
    rng.shuffle(scattered)
    for block in scattered:
        allocator.free(block)
    pool_k = torch.randn(NUM_LAYERS, num_blocks * block_size, KV_HEADS, HEAD_DIM, generator=g)  # garbage everywhere
    pool_v = torch.randn(NUM_LAYERS, num_blocks * block_size, KV_HEADS, HEAD_DIM, generator=g)
    backend, scale = TorchAttentionBackend(), HEAD_DIM**-0.5

    tables = [[] for _ in seq_lens]
    done = [0] * len(seq_lens)
    full_k = [[torch.empty(0, KV_HEADS, HEAD_DIM)] * len(seq_lens) for _ in range(NUM_LAYERS)]
    full_v = [[torch.empty(0, KV_HEADS, HEAD_DIM)] * len(seq_lens) for _ in range(NUM_LAYERS)]
    while any(d < n for d, n in zip(done, seq_lens)):
        # one step: some sequences take a chunk (a prefill piece or a decode token), in random order
        step = [s for s in range(len(seq_lens)) if done[s] < seq_lens[s] and rng.random() < 0.7]
        rng.shuffle(step)
        if not step:
            continue
        ends = {s: min(seq_lens[s], done[s] + rng.choice([1, 1, 2, 5, 16])) for s in step}
        for s in step:
            grow_block_table(tables[s], ends[s], block_size, allocator)
        width = max(len(tables[s]) for s in step)
        meta = AttentionMetadata(
            query_lens=[ends[s] - done[s] for s in step],
            seq_lens=[ends[s] for s in step],
            slot_mapping=torch.tensor([x for s in step for x in slot_mapping(tables[s], done[s], ends[s], block_size)]),
            block_tables=torch.tensor([tables[s] + [0] * (width - len(tables[s])) for s in step]),
            block_size=block_size,
        )
        num_new = sum(meta.query_lens)
        for layer in range(NUM_LAYERS):
            q = torch.randn(num_new, HEADS, HEAD_DIM, generator=g)
            k = torch.randn(num_new, KV_HEADS, HEAD_DIM, generator=g)
            v = torch.randn(num_new, KV_HEADS, HEAD_DIM, generator=g)
            out = backend.forward(q, k, v, pool_k[layer], pool_v[layer], meta, scale)
            row = 0
            for s, n in zip(step, meta.query_lens):
                full_k[layer][s] = torch.cat([full_k[layer][s], k[row : row + n]])
                full_v[layer][s] = torch.cat([full_v[layer][s], v[row : row + n]])
                expected = reference_attention(q[row : row + n], full_k[layer][s], full_v[layer][s], scale)
                torch.testing.assert_close(out[row : row + n].double(), expected, rtol=1e-5, atol=1e-5)
                row += n
        for s in step:
            done[s] = ends[s]

    # every token of every sequence reads back, through its block table, exactly as it was written
    width = max(len(t) for t in tables)
    meta = AttentionMetadata(
        list(seq_lens), list(seq_lens), torch.zeros(0, dtype=torch.long),
        torch.tensor([t + [0] * (width - len(t)) for t in tables]), block_size,
    )
    for s in range(len(seq_lens)):
        slots = meta.context_slots(s)
        assert slots.tolist() == slot_mapping(tables[s], 0, seq_lens[s], block_size)
        for layer in range(NUM_LAYERS):
            assert torch.equal(pool_k[layer][slots], full_k[layer][s])
            assert torch.equal(pool_v[layer][slots], full_v[layer][s])
