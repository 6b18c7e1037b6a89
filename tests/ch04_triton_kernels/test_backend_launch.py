"""Task 4.4: the Triton backend stores a step's K/V and runs one attention launch, the right kernel for the step.

The oracle is chapter 0's TorchAttentionBackend on a copy of the same pool:
the outputs must match and so must the pools after the step.
"""

import pytest
import torch
from kernel_cases import TOLERANCES, generator, paged_pool

from miniyaie.kernels import TritonAttentionBackend
from miniyaie.model import AttentionMetadata, TorchAttentionBackend

NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE = 4, 2, 64, 4


def step(prefixes: list[int], query_lens: list[int], seed: int):
    """One step's inputs: (q, k, v, k_cache, v_cache, meta) for sequences with these cached prefixes and new tokens.

    The new tokens' slots hold NaN until the step writes them, so attention that reads the pool before
    storing the step's K/V gives NaN.
    """
    seq_lens = [p + n for p, n in zip(prefixes, query_lens)]
    k_cache, v_cache, block_tables = paged_pool(seq_lens, NUM_KV_HEADS, HEAD_DIM, PAGE, torch.float32, seed)
    slots = []
    for s, (prefix, length) in enumerate(zip(prefixes, seq_lens)):
        positions = torch.arange(prefix, length)
        slots.append(block_tables[s, positions // PAGE] * PAGE + positions % PAGE)
        k_cache[slots[-1]], v_cache[slots[-1]] = float("nan"), float("nan")
    gen = generator(seed + 1)
    num_tokens = sum(query_lens)
    q = torch.randn(num_tokens, NUM_HEADS, HEAD_DIM, generator=gen)
    k = torch.randn(num_tokens, NUM_KV_HEADS, HEAD_DIM, generator=gen)
    v = torch.randn(num_tokens, NUM_KV_HEADS, HEAD_DIM, generator=gen)
    meta = AttentionMetadata(list(query_lens), seq_lens, torch.cat(slots), block_tables, PAGE)
    return q, k, v, k_cache, v_cache, meta


def run_both(backend: TritonAttentionBackend, inputs):
    q, k, v, k_cache, v_cache, meta = inputs
    ours_k, ours_v, ref_k, ref_v = k_cache.clone(), v_cache.clone(), k_cache.clone(), v_cache.clone()
    out = backend.forward(q, k, v, ours_k, ours_v, meta, HEAD_DIM**-0.5)
    expected = TorchAttentionBackend().forward(q, k, v, ref_k, ref_v, meta, HEAD_DIM**-0.5)
    same_pool = lambda ours, ref: torch.equal(ours.nan_to_num(7.0), ref.nan_to_num(7.0))  # noqa: E731 - unowned slots hold NaN
    assert same_pool(ours_k, ref_k) and same_pool(ours_v, ref_v), (
        "after the step the pool must hold exactly what chapter 0's backend writes: the new K/V at the slot mapping"
    )
    assert out.shape == expected.shape, f"output shape {tuple(out.shape)}, expected {tuple(expected.shape)}"
    assert not out.isnan().any(), (
        "NaN in the output: a kernel read a slot no sequence owns, or read the new tokens' slots before the step's K/V "
        "were stored there (they hold NaN until then)"
    )
    torch.testing.assert_close(out, expected, **TOLERANCES[torch.float32], msg=lambda m: (
        f"query_lens {meta.query_lens}, seq_lens {meta.seq_lens} (after the step): the output differs from chapter 0's "
        f"backend, which attends each query to all its sequence's tokens up to its own, the new ones included: {m}"))


@pytest.mark.task("4.4")
def test_a_decode_step_uses_the_decode_kernel():
    backend = TritonAttentionBackend()
    # The longest sequence holds 17 tokens after the step, one past a 16-token tile: the decode kernel's splits
    # must be sized by the lengths after the step (meta.seq_lens), the new token included.
    run_both(backend, step([5, 16, 1], [1, 1, 1], seed=0))
    assert backend.launches == {"decode": 1, "extend": 0}, f"one token per sequence is a decode step: {backend.launches}"


@pytest.mark.task("4.4")
@pytest.mark.parametrize("prefixes, query_lens", [([5, 0, 9], [1, 6, 3]), ([0], [7]), ([3, 2], [2, 1])])
def test_any_other_step_uses_the_extend_kernel(prefixes, query_lens):
    backend = TritonAttentionBackend()
    run_both(backend, step(prefixes, query_lens, seed=sum(query_lens)))
    assert backend.launches == {"decode": 0, "extend": 1}, f"query lengths {query_lens} need the extend kernel: {backend.launches}"


@pytest.mark.task("4.4")
def test_every_layer_of_a_step_and_the_next_step_get_their_own_sizes():
    """Two layers share one step's metadata; the next step (now pure decode) brings new metadata."""
    backend = TritonAttentionBackend()
    prefill = step([0, 4], [6, 2], seed=3)
    run_both(backend, prefill)
    run_both(backend, (*prefill[:5], prefill[5]))  # the second layer: same metadata object
    decode = step([6, 2], [1, 1], seed=4)
    q, _, _, k_cache, _, meta = decode
    seq_lens, query_start, max_query_len = backend._step_values(meta, q, k_cache)
    assert (seq_lens.tolist(), query_start.tolist(), max_query_len) == ([7, 3], [0, 1, 2], 1), (
        f"the next step (query_lens {meta.query_lens}, seq_lens {meta.seq_lens}) brings a new metadata object: its sizes "
        f"are seq_lens [7, 3], query_start [0, 1, 2], max_query_len 1, not {seq_lens.tolist()}, {query_start.tolist()}, "
        f"{max_query_len} (the last step's sizes send the kernels past the end of this step's tensors)"
    )
    run_both(backend, decode)
    assert backend.launches == {"decode": 1, "extend": 2}, backend.launches


@pytest.mark.task("4.4")
def test_the_step_sizes_are_made_without_reading_a_tensor_back(monkeypatch):
    """On a GPU, int(t), t.item() or t.tolist() of a device tensor waits for all queued work: here they raise.

    The sizes a step needs are made from the metadata's host lists; _step_values reads no tensor back.
    """
    inputs = step([5, 0], [1, 6], seed=7)
    q, k, v, k_cache, v_cache, meta = inputs

    def waits(*args, **kwargs):
        raise AssertionError(
            "_step_values read a tensor back to the host (int(), .item(), .tolist()): on a GPU that waits for "
            "every queued kernel, in each layer; the metadata's query_lens and seq_lens are host lists already"
        )

    backend = TritonAttentionBackend()
    with monkeypatch.context() as patched:
        for name in ("__int__", "__index__", "__float__", "item", "tolist", "numpy"):
            patched.setattr(torch.Tensor, name, waits)
        seq_lens, query_start, max_query_len = backend._step_values(meta, q, k_cache)
    assert max_query_len == 6 and backend._max_seq_len == 6, (
        f"query_lens {meta.query_lens}, seq_lens {meta.seq_lens}: the longest query is 6 and the longest context 6, "
        f"not {max_query_len} and {backend._max_seq_len}"
    )
    assert query_start.tolist() == [0, 1, 7] and seq_lens.tolist() == [6, 6], (
        f"query_start {query_start.tolist()} (expected [0, 1, 7]), seq_lens {seq_lens.tolist()} (expected [6, 6])"
    )
