"""Task 0.4: attention over a growing cache: causal attention of new queries over a sequence's context, and the
torch backend that fills the cache and reads it, step after step."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import example, given
from hypothesis import strategies as st

from miniyaie.model import AttentionMetadata, TorchAttentionBackend, causal_attention


def reference_attention(q, k, v, scale):
    """scaled_dot_product_attention with the causal mask offset by the cached prefix."""
    num_new, heads, _ = q.shape
    context = k.shape[0]
    group = heads // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    positions = torch.arange(context - num_new, context)
    mask = torch.arange(context)[None, :] <= positions[:, None]
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).double(), k.transpose(0, 1).double(), v.transpose(0, 1).double(), attn_mask=mask, scale=scale
    )
    return out.transpose(0, 1)


def random_qkv(num_new, context, kv_heads, group, head_dim, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(num_new, kv_heads * group, head_dim, generator=g)
    k = torch.randn(context, kv_heads, head_dim, generator=g)
    v = torch.randn(context, kv_heads, head_dim, generator=g)
    return q, k, v


attention_cases = dict(
    context=st.integers(1, 24),
    new_fraction=st.floats(0, 1),
    kv_heads=st.integers(1, 3),
    group=st.integers(1, 3),
    head_dim=st.sampled_from([4, 8, 16]),
    seed=st.integers(0, 2**16),
)


@pytest.mark.task("0.4")
@given(**attention_cases)
@example(context=1, new_fraction=1.0, kv_heads=1, group=1, head_dim=4, seed=0)  # one token, nothing cached
@example(context=17, new_fraction=0.0, kv_heads=3, group=3, head_dim=16, seed=1)  # decode: one new token
@example(context=9, new_fraction=1.0, kv_heads=2, group=2, head_dim=8, seed=2)  # prefill: nothing cached
def test_causal_attention_matches_sdpa(context, new_fraction, kv_heads, group, head_dim, seed):
    num_new = max(1, round(new_fraction * context))
    q, k, v = random_qkv(num_new, context, kv_heads, group, head_dim, seed)
    scale = head_dim**-0.5
    out = causal_attention(q, k, v, scale)
    assert out.shape == q.shape and out.dtype == q.dtype, f"q's shape and dtype: got {tuple(out.shape)} {out.dtype}"
    torch.testing.assert_close(
        out.double(), reference_attention(q, k, v, scale), rtol=1e-5, atol=1e-5,
        msg=lambda m: f"{num_new} new queries over {context} keys ({context - num_new} cached: new query i sees keys "
        f"0..{context - num_new}+i), {kv_heads} K/V heads serving {group} consecutive query heads each: {m}",
    )


@pytest.mark.task("0.4")
@given(context=st.integers(2, 20), kv_heads=st.integers(1, 2), group=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_decode_rows_equal_full_prefill_rows(context, kv_heads, group, seed):
    """Attending the last n queries over the cache gives the last n rows of a full causal prefill."""
    q, k, v = random_qkv(context, context, kv_heads, group, 8, seed)
    full = causal_attention(q, k, v, 0.3)
    for num_new in (1, context // 2, context - 1):
        num_new = max(num_new, 1)
        torch.testing.assert_close(
            causal_attention(q[-num_new:], k, v, 0.3), full[-num_new:], rtol=1e-5, atol=1e-5,
            msg=lambda m: f"the last {num_new} of {context} queries over all {context} keys differ from the last "
            f"{num_new} rows of the full causal prefill (they are the newest tokens, after {context - num_new} cached): {m}",
        )
    torch.testing.assert_close(
        full[0], v[0].repeat_interleave(group, 0), rtol=1e-5, atol=1e-5,
        msg=lambda m: f"the first query sees only the first key, so each query head outputs its K/V group's v[0]: {m}",
    )


@pytest.mark.task("0.4")
@given(
    seq_lens=st.lists(st.integers(1, 20), min_size=1, max_size=4),
    cached_fraction=st.floats(0, 1),
    block_size=st.sampled_from([1, 4, 7, 16]),
    seed=st.integers(0, 2**16),
)
@example(seq_lens=[16], cached_fraction=0.5, block_size=16, seed=0)  # ends exactly on a block boundary
@example(seq_lens=[1, 1], cached_fraction=0.0, block_size=1, seed=1)
def test_torch_backend_reads_cache_through_block_tables(seq_lens, cached_fraction, block_size, seed):
    """New K/V land in their slots; each sequence attends over exactly its own context."""
    g = torch.Generator().manual_seed(seed)
    kv_heads, heads, head_dim = 2, 4, 8
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + 3
    order = torch.randperm(num_blocks, generator=g)  # scattered, non-contiguous blocks
    tables, used = [], 0
    for count in blocks_per_seq:
        tables.append(order[used : used + count].tolist() + [0] * (max(blocks_per_seq) - count))
        used += count
    block_tables = torch.tensor(tables)
    k_cache = torch.randn(num_blocks * block_size, kv_heads, head_dim, generator=g)  # garbage everywhere
    v_cache = torch.randn(num_blocks * block_size, kv_heads, head_dim, generator=g)

    cached = [min(n - 1, int(cached_fraction * n)) for n in seq_lens]
    full_k = [torch.randn(n, kv_heads, head_dim, generator=g) for n in seq_lens]
    full_v = [torch.randn(n, kv_heads, head_dim, generator=g) for n in seq_lens]

    def slots(seq, positions):
        return [tables[seq][p // block_size] * block_size + p % block_size for p in positions]

    for s, c in enumerate(cached):  # the prefix is already in the cache
        k_cache[slots(s, range(c))] = full_k[s][:c]
        v_cache[slots(s, range(c))] = full_v[s][:c]
    q = torch.randn(sum(n - c for n, c in zip(seq_lens, cached)), heads, head_dim, generator=g)
    meta = AttentionMetadata(
        query_lens=[n - c for n, c in zip(seq_lens, cached)],
        seq_lens=list(seq_lens),
        slot_mapping=torch.tensor([x for s, (n, c) in enumerate(zip(seq_lens, cached)) for x in slots(s, range(c, n))]),
        block_tables=block_tables,
        block_size=block_size,
    )
    for s, n in enumerate(seq_lens):
        got = meta.context_slots(s)
        assert got.dtype == torch.int64 and got.tolist() == slots(s, range(n)), (
            f"context_slots({s}) with block table {tables[s]} and block_size {block_size}: got {got.tolist()} "
            f"({got.dtype}), want {slots(s, range(n))}"
        )
    new_k = torch.cat([full_k[s][c:] for s, c in enumerate(cached)])
    new_v = torch.cat([full_v[s][c:] for s, c in enumerate(cached)])
    out = TorchAttentionBackend().forward(q, new_k, new_v, k_cache, v_cache, meta, 0.35)

    start = 0
    for s, (n, c) in enumerate(zip(seq_lens, cached)):
        expected = reference_attention(q[start : start + n - c], full_k[s], full_v[s], 0.35)
        torch.testing.assert_close(
            out[start : start + n - c].double(), expected, rtol=1e-5, atol=1e-5,
            msg=lambda m: f"sequence {s} ({c} cached + {n - c} new tokens, rows {start}..{start + n - c - 1} of the "
            f"step): its queries attend over its {n} context tokens, the new ones included: {m}",
        )
        for name, cache, full in (("K", k_cache, full_k[s]), ("V", v_cache, full_v[s])):
            torch.testing.assert_close(
                cache[slots(s, range(n))], full,
                msg=lambda m: f"sequence {s}'s {name} in the cache after the step (new tokens at their slot_mapping slots): {m}",
            )
        start += n - c


@pytest.mark.task("0.4")
@given(
    lengths=st.lists(st.integers(1, 14), min_size=1, max_size=3),
    chunks=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    block_size=st.sampled_from([1, 3, 8]),
    seed=st.integers(0, 2**16),
)
@example(lengths=[5], chunks=[1], block_size=8, seed=0)  # a one-token prefill, then decode steps
@example(lengths=[9, 4], chunks=[4, 2], block_size=3, seed=1)  # prefill chunks, then decode, two sequences per step
def test_steps_over_a_growing_cache_equal_one_full_prefill(lengths, chunks, block_size, seed):
    """Fed step by step (prefill chunks of the given sizes, then one token a step), every token's attention
    output is the row a single full causal prefill gives it, and the cache ends with every token's K/V in its
    slot and nothing else changed."""
    g = torch.Generator().manual_seed(seed)
    kv_heads, heads, head_dim, scale = 2, 4, 8, 0.4
    blocks_per_seq = [-(-n // block_size) for n in lengths]
    num_blocks = sum(blocks_per_seq) + 2
    order = torch.randperm(num_blocks, generator=g).tolist()
    tables, used = [], 0
    for count in blocks_per_seq:
        tables.append(order[used : used + count] + [0] * (max(blocks_per_seq) - count))
        used += count
    k_cache = torch.randn(num_blocks * block_size, kv_heads, head_dim, generator=g)
    v_cache = torch.randn(num_blocks * block_size, kv_heads, head_dim, generator=g)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    qs = [torch.randn(n, heads, head_dim, generator=g) for n in lengths]
    ks = [torch.randn(n, kv_heads, head_dim, generator=g) for n in lengths]
    vs = [torch.randn(n, kv_heads, head_dim, generator=g) for n in lengths]

    def slot(seq, p):
        return tables[seq][p // block_size] * block_size + p % block_size

    done, outputs, step = [0] * len(lengths), [[] for _ in lengths], 0
    while any(d < n for d, n in zip(done, lengths)):
        size = chunks[step] if step < len(chunks) else 1  # prefill chunks first, then decode steps
        running = [s for s, n in enumerate(lengths) if done[s] < n]
        new = {s: list(range(done[s], min(lengths[s], done[s] + size))) for s in running}
        meta = AttentionMetadata(
            query_lens=[len(new[s]) for s in running],
            seq_lens=[new[s][-1] + 1 for s in running],
            slot_mapping=torch.tensor([slot(s, p) for s in running for p in new[s]]),
            block_tables=torch.tensor([tables[s] for s in running]),
            block_size=block_size,
        )
        out = TorchAttentionBackend().forward(
            torch.cat([qs[s][new[s]] for s in running]), torch.cat([ks[s][new[s]] for s in running]),
            torch.cat([vs[s][new[s]] for s in running]), k_cache, v_cache, meta, scale,
        )
        assert out.shape == (sum(meta.query_lens), heads, head_dim), f"one row per new token, got {tuple(out.shape)}"
        start = 0
        for s in running:
            outputs[s].append(out[start : start + len(new[s])])
            start += len(new[s])
            done[s] = new[s][-1] + 1
        step += 1

    for s, n in enumerate(lengths):
        steps = [len(o) for o in outputs[s]]
        torch.testing.assert_close(
            torch.cat(outputs[s]).double(), reference_attention(qs[s], ks[s], vs[s], scale), rtol=1e-5, atol=1e-5,
            msg=lambda m: f"sequence {s} fed in steps of {steps} tokens (block_size {block_size}): each token's output "
            f"must be its row of one causal prefill over all {n} tokens (it sees every earlier token, cached in an "
            f"earlier step or new in this one, and itself, never a later one): {m}",
        )
        written = [slot(s, p) for p in range(n)]
        for name, cache, full in (("K", k_cache, ks[s]), ("V", v_cache, vs[s])):
            torch.testing.assert_close(
                cache[written], full, rtol=0, atol=0,
                msg=lambda m: f"sequence {s}'s {name} in the cache after all its steps (token p at its slot): {m}",
            )
    untouched = sorted(set(range(num_blocks * block_size)) - {slot(s, p) for s, n in enumerate(lengths) for p in range(n)})
    assert torch.equal(k_cache[untouched], before_k[untouched]) and torch.equal(v_cache[untouched], before_v[untouched]), (
        "a step writes only the slots of its slot_mapping: some other slot of the cache changed"
    )
