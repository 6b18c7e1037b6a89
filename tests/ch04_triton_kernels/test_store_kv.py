"""Task 4.4: storing K/V through the slot mapping."""

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kernel_cases import dtypes, generator

from miniyaie.kernels import store_kv, store_kv_reference


@pytest.mark.task("4.4")
@settings(max_examples=15)
@given(num_tokens=st.integers(1, 20), num_kv_heads=st.sampled_from([1, 3]), head_dim=st.sampled_from([64, 80]),
       dtype=dtypes, seed=st.integers(0, 2**16))
@example(num_tokens=1, num_kv_heads=1, head_dim=64, dtype=torch.float32, seed=0)
def test_store_writes_each_token_to_its_slot_and_nothing_else(num_tokens, num_kv_heads, head_dim, dtype, seed):
    gen = generator(seed)
    num_slots = 48
    slots = torch.randperm(num_slots, generator=gen)[:num_tokens]  # scattered, like a real slot mapping
    k = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    v = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    caches = [torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(dtype) for _ in range(2)]
    expected = [c.clone() for c in caches]
    store_kv(k, v, *caches, slots)
    store_kv_reference(k, v, *expected, slots)
    for name, ours, ref in (("k_cache", caches[0], expected[0]), ("v_cache", caches[1], expected[1])):
        wrong = sorted({int(s) for s in (ours != ref).nonzero()[:, 0]})
        targets = set(slots.tolist())
        assert not wrong, (
            f"{name}: rows {wrong} differ from the reference ({[s for s in wrong if s not in targets]} are slots no token "
            f"maps to and must not change); token t's row goes to row slot_mapping[t], cast to the cache's dtype"
        )


@pytest.mark.task("4.4")
def test_store_into_one_layer_of_a_pool_leaves_the_other_layers():
    pool_k = torch.zeros(3, 10, 2, 64)
    pool_v = torch.zeros(3, 10, 2, 64)
    k, v = torch.ones(2, 2, 64), torch.full((2, 2, 64), 2.0)
    store_kv(k, v, pool_k[1], pool_v[1], torch.tensor([9, 0]))
    assert pool_k[1, [0, 9]].eq(1).all() and pool_v[1, [0, 9]].eq(2).all(), (
        "slots 9 and 0 of layer 1 (a view into a pool of 3 layers) must hold the tokens' K (1) and V (2)"
    )
    assert pool_k.sum() == 2 * 2 * 64 and pool_v.sum() == 2 * 2 * 2 * 64, (
        "a row outside the two slots changed: this layer's other rows and the other layers must stay as they were"
    )


@pytest.mark.task("4.4")
def test_a_slot_past_2_to_the_31_elements_is_written_where_it_is():
    """A pool of 2**31 + 2,048 half-precision elements (4 GiB allocated; only the rows written here are touched).

    The last slot's offset, slot * row stride, is past what an int32 holds: computed in int32 it wraps, and the
    store lands outside the pool (in the interpreter that kills the test process: the crash names the store).
    """
    num_slots = 2**31 // 256 + 8  # a row of the pool: (K, V) x 2 heads x 64 = 256 elements
    pool = torch.empty(num_slots, 2, 2, 64, dtype=torch.float16)
    k_cache, v_cache = pool[:, 0], pool[:, 1]  # one layer's K and V, each a strided view, as a real pool gives them
    slots = torch.tensor([num_slots - 1, 3])
    store_kv(torch.ones(2, 2, 64), torch.full((2, 2, 64), 2.0), k_cache, v_cache, slots)
    assert k_cache[slots].eq(1).all() and v_cache[slots].eq(2).all(), (
        f"slot {num_slots - 1} sits {(num_slots - 1) * 256:,} elements into the pool, past 2**31: its K (1) and V (2) "
        "must land there (compute slot * stride in int64)"
    )
