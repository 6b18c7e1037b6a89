"""Task 2.2 (the pool): sizing the pool from a byte budget, and copying blocks in it; the provided make_pool (ungraded)."""

import dataclasses

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from miniyaie.model import KVCache, ModelConfig
from miniyaie.paged import copy_blocks, make_pool, num_blocks_for_budget

TINY = ModelConfig(
    family="llama", vocab_size=32, hidden_size=16, intermediate_size=32, num_layers=2, num_heads=4,
    num_kv_heads=2, head_dim=4, rms_norm_eps=1e-6, max_position_embeddings=64, rope_theta=10000.0,
)
SMOLLM2_LIKE = dataclasses.replace(TINY, num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64)
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.mark.task("2.2")
@given(
    num_layers=st.integers(1, 4), num_kv_heads=st.integers(1, 3), head_dim=st.sampled_from([4, 8, 80]),
    dtype=st.sampled_from(DTYPES), block_size=st.sampled_from([1, 7, 16]), budget=st.integers(0, 2**20),
)
@example(num_layers=2, num_kv_heads=2, head_dim=4, dtype=torch.float32, block_size=16, budget=10 * 2048)  # exactly 10 blocks
@example(num_layers=2, num_kv_heads=2, head_dim=4, dtype=torch.float32, block_size=16, budget=2047)  # less than one block
def test_pool_sized_from_a_budget_fits_it_and_one_more_block_would_not(
    num_layers, num_kv_heads, head_dim, dtype, block_size, budget
):
    config = dataclasses.replace(TINY, num_layers=num_layers, num_kv_heads=num_kv_heads, head_dim=head_dim)
    one_block = make_pool(config, 1, block_size, dtype).nbytes  # measured on real tensors
    if budget < one_block:
        with pytest.raises(ValueError):  # a budget smaller than one block holds no pool at all
            num_blocks = num_blocks_for_budget(config, budget, block_size, dtype)
            pytest.fail(f"Task 2.2: a budget of {budget} bytes is less than one block ({one_block} bytes), "
                        f"so it holds no pool: ValueError, not {num_blocks} block(s)")
        return
    num_blocks = num_blocks_for_budget(config, budget, block_size, dtype)
    assert num_blocks * one_block <= budget, f"Task 2.2: {num_blocks} blocks of {one_block} bytes do not fit in {budget} bytes"
    assert budget < (num_blocks + 1) * one_block, f"Task 2.2: {num_blocks + 1} blocks of {one_block} bytes fit in {budget} bytes"
    assert make_pool(config, num_blocks, block_size, dtype).nbytes == num_blocks * one_block, (
        f"Task 2.2: a pool of {num_blocks} blocks does not take {num_blocks} times one block's {one_block} bytes"
    )


@pytest.mark.task("2.2")
def test_budget_of_a_real_model():
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 dims, bf16: 2 x 30 x 3 x 64 x 2 = 23,040 bytes a token,
    # 368,640 bytes a block of 16 tokens; 256 MiB holds 728 such blocks (11,648 tokens).
    for dtype, block_size, token_bytes in ((torch.bfloat16, 16, 23_040), (torch.float32, 1, 46_080)):
        want = 256 * 2**20 // (block_size * token_bytes)
        got = num_blocks_for_budget(SMOLLM2_LIKE, 256 * 2**20, block_size, dtype)
        hint = {want * 2: f"a token counted at half its size: a {dtype} element is {dtype.itemsize} bytes",
                want // 2: f"a token counted at twice its size: a {dtype} element is {dtype.itemsize} bytes, "
                           "and K and V are counted once each"}.get(got, "")
        assert got == want, (
            f"Task 2.2: 256 MiB of SmolLM2-135M's K/V in {dtype}, blocks of {block_size}: {got} blocks, not {want} "
            f"(a token is 2 (K and V) x 30 layers x 3 KV heads x 64 dims x {dtype.itemsize} bytes = {token_bytes:,} "
            f"bytes){': ' + hint if hint else ''}"
        )


@pytest.mark.ungraded
def test_the_pool_is_chapter_0s_flat_cache():
    pool = make_pool(TINY, 5, 7, torch.float32)
    assert isinstance(pool, KVCache) and pool.num_slots == 35
    assert pool.k.shape == (TINY.num_layers, 35, TINY.num_kv_heads, TINY.head_dim) == pool.v.shape
    with pytest.raises(ValueError):
        make_pool(TINY, 0, 16, torch.float32)


@pytest.mark.task("2.2")
@given(
    num_blocks=st.integers(2, 8), block_size=st.sampled_from([1, 3, 16]), data=st.data(),
)
@example(num_blocks=4, block_size=3, data=None)  # two copies; blocks 1 and 2 are sources and must not change
@example(num_blocks=3, block_size=3, data=None)  # block 0 is freed after its copy is queued, then a later copy's destination
@example(num_blocks=5, block_size=3, data=None)  # a destination is a later pair's source: [(0, 1), (1, 2)]
def test_copy_blocks_copies_k_and_v_of_every_layer_and_nothing_else(num_blocks, block_size, data):
    if data is None:  # PagedMemory queues [(0, 1), (2, 0)] when block 0's owner is freed between two copy-on-writes
        copies = {4: [(2, 0), (1, 3)], 3: [(0, 1), (2, 0)], 5: [(0, 1), (1, 2)]}[num_blocks]
    else:  # distinct destinations; any block may be a source, a destination's included, before or after it
        destinations = data.draw(st.lists(st.integers(0, num_blocks - 1), unique=True, max_size=num_blocks))
        copies = [(data.draw(st.integers(0, num_blocks - 1)), dst) for dst in destinations]
    pool = make_pool(TINY, num_blocks, block_size, torch.float32)
    pool.k.copy_(torch.randn_like(pool.k))
    pool.v.copy_(torch.randn_like(pool.v))
    k, v = pool.k.clone(), pool.v.clone()
    copy_blocks(pool, copies, block_size)
    expected_k, expected_v = k.clone(), v.clone()
    for src, dst in copies:
        expected_k[:, dst * block_size : (dst + 1) * block_size] = k[:, src * block_size : (src + 1) * block_size]
        expected_v[:, dst * block_size : (dst + 1) * block_size] = v[:, src * block_size : (src + 1) * block_size]
    for name, got, want in (("K", pool.k, expected_k), ("V", pool.v, expected_v)):
        wrong = sorted({slot // block_size for slot in torch.nonzero((got != want).any(-1).any(-1).any(0)).flatten().tolist()})
        before = k if name == "K" else v
        block = lambda t, b: t[:, b * block_size : (b + 1) * block_size]  # noqa: E731
        sources = {dst: src for src, dst in copies}
        stories = []
        for b in wrong:
            if b not in sources:
                stories.append(f"block {b} is no destination, yet it changed: only the destinations may be written")
            elif torch.equal(block(got, b), block(before, b)):
                stories.append(f"block {b} still holds its old {name}: nothing was written into it (a copy into a "
                               "temporary, such as an advanced-index read, changes nothing in the pool)")
            elif sources[b] in sources and torch.equal(block(got, b), block(got, sources[b])):
                stories.append(f"block {b} holds what block {sources[b]} holds after the call, not before it: every "
                               "pair reads its source as it was before the call, even a block another pair writes into")
            else:
                stories.append(f"block {b} does not hold what block {sources[b]} held before the call")
        assert not wrong, f"Task 2.2: after copying {copies} (src, dst), {name}: " + "; ".join(stories)


class DevicesOfEveryOp(TorchDispatchMode):
    """Records, for every tensor operation run inside it, the devices of the tensors it is given."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, list[str]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        given = [t for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor) and t.dim() > 0]
        self.ops.append((str(func), [t.device.type for t in given]))
        return func(*args, **(kwargs or {}))


@pytest.mark.task("2.2")
def test_copy_blocks_builds_its_indexes_on_the_pools_device():
    """On a GPU, indexes built on the CPU cost a host-to-device copy and a wait at every step; the "meta" device
    (shapes, no data) stands in for the GPU here: every tensor the copy reads the pool with must be on the pool's."""
    pool = make_pool(TINY, 4, 3, torch.float32, device="meta")
    with DevicesOfEveryOp() as watch:
        copy_blocks(pool, [(0, 1), (2, 3)], 3)
    mixed = [(op, devices) for op, devices in watch.ops if "meta" in devices and set(devices) != {"meta"}]
    assert not mixed, (
        f"Task 2.2: copy_blocks indexes a pool on the 'meta' device with tensors that are not on the pool's device: "
        f"{mixed[0][0]} was given tensors on {mixed[0][1]}. Build the slot indexes on the pool's device (pool.k.device): "
        "on a GPU, indexes made on the CPU are copied to the device and waited for at every step"
    )
