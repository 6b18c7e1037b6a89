"""Task 4.1 at its edges: the split kernel's log-sum-exp, scores near ±100, the merge on its own.

Random normal inputs give scores of a few units, where a softmax without
its running max still works. Here scores reach ±100 (exp(100) overflows
float32, exp(-100) underflows to 0), built from exactly representable
values so that a GPU's TF32/bf16 products are exact too.
"""

import pytest
import torch
from kernel_cases import assert_close, generator, paged_pool

from miniyaie.kernels import decode_attention, decode_attention_reference, extend_attention, extend_attention_reference
from miniyaie.kernels.decode_attention_kernel import decode_partials, merge_splits

HEAD_DIM = 64


def gather(cache, block_tables, seq, length, page_size):
    positions = torch.arange(length)
    return cache[block_tables[seq, positions // page_size] * page_size + positions % page_size].float()


def split_reference(q, k_cache, v_cache, block_tables, lens, page_size, scale, first, last):
    """Softmax attention over tokens [first, last) of each sequence: (out [S, H, D], lse [S, H])."""
    num_seqs, num_heads, _ = q.shape
    group = num_heads // k_cache.shape[1]
    out = torch.zeros(num_seqs, num_heads, q.shape[2])
    lse = torch.full((num_seqs, num_heads), float("-inf"))
    for seq, length in enumerate(lens):
        end = min(last, length)
        if end <= first:
            continue
        k = gather(k_cache, block_tables, seq, length, page_size)[first:end].repeat_interleave(group, dim=1)
        v = gather(v_cache, block_tables, seq, length, page_size)[first:end].repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,khd->hk", q[seq].float(), k) * scale
        out[seq] = torch.einsum("hk,khd->hd", scores.softmax(-1), v)
        lse[seq] = scores.logsumexp(-1)
    return out, lse


def random_case(lens, group, page_size, dtype, seed=0, num_kv_heads=2):
    k_cache, v_cache, block_tables = paged_pool(lens, num_kv_heads, HEAD_DIM, page_size, dtype, seed)
    q = torch.randn(len(lens), num_kv_heads * group, HEAD_DIM, generator=generator(seed + 1)).to(dtype)
    return q, k_cache, v_cache, block_tables, torch.tensor(lens), page_size, HEAD_DIM**-0.5


def large_scores_case(lens, page_size, dtype, sign_of_head=(1, -1, 1, -1), seed=0):
    """Every score is ±(95..105), exactly: key j is (95 + j % 11) / 64 in every dimension, a query head is ±8.

    With scale 1/8, score = sign * (95 + j % 11). Heads of one KV group get
    opposite signs, so one tile holds rows near +100 and rows near -100.
    """
    num_kv_heads, group = 2, len(sign_of_head)
    k_cache, v_cache, block_tables = paged_pool(lens, num_kv_heads, HEAD_DIM, page_size, dtype, seed)
    for seq, length in enumerate(lens):
        positions = torch.arange(length)
        slots = block_tables[seq, positions // page_size] * page_size + positions % page_size
        k_cache[slots] = ((95 + positions % 11).float() / 64)[:, None, None].expand(length, num_kv_heads, HEAD_DIM).to(dtype)
    signs = torch.tensor(sign_of_head, dtype=torch.float32).repeat(num_kv_heads)
    return signs, k_cache, v_cache, block_tables


@pytest.mark.task("4.1")
@pytest.mark.parametrize("lens,group,page_size,dtype", [
    ([1, 37], 1, 1, torch.float32),
    ([16, 50], 3, 16, torch.float16),
    ([33], 4, 16, torch.bfloat16),
])
def test_one_split_writes_its_output_and_log_sum_exp(lens, group, page_size, dtype):
    args = random_case(lens, group, page_size, dtype)
    partials = decode_partials(*args, num_splits=1)
    out, lse = split_reference(*args, 0, max(lens))
    assert partials.lse.shape == lse.shape + (1,)
    torch.testing.assert_close(partials.lse[:, :, 0], lse, atol=2e-2, rtol=2e-3,
                               msg=lambda m: f"the split's log-sum-exp (m + log(l)) is wrong: {m}")
    assert_close(partials.out[:, :, 0, :HEAD_DIM], out, dtype)


@pytest.mark.task("4.1")
def test_each_split_attends_only_its_own_tokens_and_an_empty_one_says_so():
    """Three splits over lengths 40 and 5: the short sequence's later splits are empty (lse -inf)."""
    lens = [40, 5]
    args = random_case(lens, 2, 16, torch.float32, seed=5)
    partials = decode_partials(*args, num_splits=3)
    for split in range(3):
        first = split * partials.split_len
        out, lse = split_reference(*args, first, first + partials.split_len)
        got_lse = partials.lse[:, :, split]
        assert torch.equal(torch.isinf(got_lse), torch.isinf(lse)), (
            f"split {split}: an empty split must write lse = -inf (and only an empty one): got {got_lse.tolist()}"
        )
        live = ~torch.isinf(lse)
        torch.testing.assert_close(got_lse[live], lse[live], atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(partials.out[:, :, split, :HEAD_DIM][live], out[live], atol=2e-3, rtol=2e-3)
        assert torch.isfinite(partials.out[:, :, split, :HEAD_DIM]).all(), f"split {split}: an empty split writes 0, not NaN"


@pytest.mark.task("4.1")
@pytest.mark.parametrize("page_size,dtype", [(16, torch.float32), (1, torch.bfloat16)])
def test_decode_scores_near_plus_and_minus_100(page_size, dtype):
    lens = [45, 3]
    signs, k_cache, v_cache, block_tables = large_scores_case(lens, page_size, dtype)
    q = (8 * signs[None, :, None]).expand(len(lens), len(signs), HEAD_DIM).to(dtype).contiguous()
    args = (q, k_cache, v_cache, block_tables, torch.tensor(lens), page_size, HEAD_DIM**-0.5)
    out = decode_attention(*args, num_splits=1)
    assert torch.isfinite(out.float()).all(), (
        "scores near ±100 gave inf/NaN: exp(100) overflows float32 and exp(-100) underflows to 0, "
        "so subtract the running max before exp (online softmax)"
    )
    assert_close(out, decode_attention_reference(*args), dtype)


@pytest.mark.task("4.1")
def test_decode_splits_with_scores_near_plus_and_minus_100_merge_to_the_reference():
    lens = [45, 3]
    signs, k_cache, v_cache, block_tables = large_scores_case(lens, 16, torch.float32)
    q = (8 * signs[None, :, None]).expand(len(lens), len(signs), HEAD_DIM).contiguous()
    args = (q, k_cache, v_cache, block_tables, torch.tensor(lens), 16, HEAD_DIM**-0.5)
    out = decode_attention(*args, num_splits=3)
    assert torch.isfinite(out).all(), "split log-sum-exps near ±100: weigh each split by exp(lse - max lse)"
    assert_close(out, decode_attention_reference(*args), torch.float32)


@pytest.mark.task("4.1")
def test_merge_weighs_each_split_by_its_log_sum_exp():
    """The merge alone on made-up partials: lse near ±100, an empty split, 3 splits (not a power of two).

    The partials sit at the start of a bigger buffer whose next row is NaN: a
    merge that reads one split too many turns its output into NaN. The output is
    a view whose rows are followed by sentinel columns: a merge must write the
    first head_dim columns of its (sequence, head) and nothing else.
    """
    num_seqs, num_heads, num_splits, dim_pad, head_dim = 2, 3, 3, 64, 48
    gen = generator(0)
    buffer = torch.full((num_seqs * num_heads * num_splits + 1, dim_pad), float("nan"))
    buffer[:-1] = torch.randn(num_seqs * num_heads * num_splits, dim_pad, generator=gen)
    part_out = buffer[:-1].view(num_seqs, num_heads, num_splits, dim_pad)
    part_lse = torch.tensor([[[100.0, 99.0, float("-inf")], [-100.0, -101.5, -99.0], [3.0, 1.0, 2.0]],
                             [[105.0, float("-inf"), float("-inf")], [-95.0, 100.0, -95.0], [0.0, 0.0, 0.0]]])
    padded = torch.full((num_seqs, num_heads, head_dim + 4), -7.0)
    out = padded[..., :head_dim]
    merge_splits(part_out, part_lse, out)
    assert (padded[..., head_dim:] == -7.0).all(), "the merge wrote past head_dim (mask the store with dims < HEAD_DIM)"
    weights = torch.softmax(part_lse, dim=-1)  # exp(lse_i) / sum_j exp(lse_j), computed stably
    expected = torch.einsum("shk,shkd->shd", weights, part_out[..., :head_dim])
    assert torch.isfinite(out).all(), (
        "the merge gave inf/NaN: weigh splits by exp(lse - max lse), give an empty split (lse = -inf) "
        "weight 0, and read only the num_splits live splits"
    )
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5, msg=lambda m: (
        f"the merge is not the splits' outputs weighed by exp(lse_i) / sum_j exp(lse_j) (weights that sum to 1): {m}"))


@pytest.mark.task("4.1")
@pytest.mark.parametrize("page_size,dtype", [(16, torch.float32), (1, torch.bfloat16)])
def test_extend_scores_near_plus_and_minus_100(page_size, dtype):
    """A cached prefix plus 20 new tokens whose query rows alternate between scores near +100 and near -100."""
    chunks = [(13, 20), (0, 5)]
    lens = [prefix + new for prefix, new in chunks]
    _, k_cache, v_cache, block_tables = large_scores_case(lens, page_size, dtype)
    num_tokens = sum(new for _, new in chunks)
    row_signs = torch.tensor([1.0, -1.0]).repeat((num_tokens + 1) // 2)[:num_tokens]
    q = (8 * row_signs[:, None, None]).expand(num_tokens, 8, HEAD_DIM).to(dtype).contiguous()
    query_start = torch.tensor([0, chunks[0][1], num_tokens])
    args = (q, k_cache, v_cache, block_tables, query_start, torch.tensor(lens), page_size, HEAD_DIM**-0.5)
    out = extend_attention(*args)
    assert torch.isfinite(out.float()).all(), (
        "scores near ±100 gave inf/NaN: keep a running max per query row and subtract it before exp "
        "(or a query row saw no key: new token i sees keys 0 .. prefix_len + i, itself included)"
    )
    assert_close(out, extend_attention_reference(*args), dtype)
