"""Writing the step's new K/V into the paged pool, one token's row per slot in slot_mapping."""

from __future__ import annotations

import torch

from miniyaie.kernels._triton import tl, triton


def store_kv_reference(k, v, k_cache, v_cache, slot_mapping: torch.Tensor) -> None:
    """k, v: [num_tokens, num_kv_heads, head_dim] -> k_cache[slot_mapping[t]] = k[t] (same for v)."""
    k_cache[slot_mapping] = k.to(k_cache.dtype)
    v_cache[slot_mapping] = v.to(v_cache.dtype)


# ANCHOR: store_kernel
@triton.jit
def _store_kv_kernel(
    k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, slot_mapping_ptr,
    stride_kt, stride_vt, stride_cs, ROW: tl.constexpr, ROW_PAD: tl.constexpr,
):
    """One program = one token: copy its K row and V row (num_kv_heads * head_dim values) to its slot.

    Token t's row goes to row slot_mapping[t] of both caches (cast to the cache's
    dtype); no other row of the cache changes, and nothing past ROW is read or
    written. Slots may be in any order; a real pool holds more than 2**31
    elements.
    """
    token = tl.program_id(0)
    cols = tl.arange(0, ROW_PAD)
    # Nudge: the slot mapping says where each token's row goes; the kernel is a masked row copy.
    # Hint 1: A token's K/V row is ROW contiguous values in the input and one row of the cache
    #   at its slot. The only traps: the offset slot * stride_cs overflows int32 in a big pool,
    #   ROW_PAD > ROW columns must be masked on both the load and the store, and the cache may
    #   have another dtype than the input.
    # Hint 2: Read this program's slot from slot_mapping and widen it to int64. Load ROW values of
    #   k and of v from this token's input rows (masked), cast them to the cache's element type,
    #   and store them at the slot's row of each cache (masked).
    # Hint 3:
    #   slot = load(slot_mapping + token).to(int64); ok = cols < ROW
    #   k = load(k_ptr + token * stride_kt + cols, mask=ok); v likewise
    #   store(k_cache_ptr + slot * stride_cs + cols, k.to(k_cache dtype), mask=ok); v likewise
    # BEGIN SOLUTION 4.4: The backend's step
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    ok = cols < ROW
    k = tl.load(k_ptr + token * stride_kt + cols, mask=ok)
    v = tl.load(v_ptr + token * stride_vt + cols, mask=ok)
    tl.store(k_cache_ptr + slot * stride_cs + cols, k.to(k_cache_ptr.dtype.element_ty), mask=ok)
    tl.store(v_cache_ptr + slot * stride_cs + cols, v.to(v_cache_ptr.dtype.element_ty), mask=ok)
    # END SOLUTION
# ANCHOR_END: store_kernel


def store_kv(k, v, k_cache, v_cache, slot_mapping: torch.Tensor) -> None:
    """Triton version of store_kv_reference (K/V rows must be contiguous per token)."""
    num_tokens = k.shape[0]
    if num_tokens == 0:
        return
    row = k.shape[1] * k.shape[2]
    for name, t in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.stride(1) != t.shape[2] or t.stride(2) != 1:
            raise ValueError(f"store_kv needs {name}'s [heads, head_dim] rows contiguous")
    _store_kv_kernel[(num_tokens,)](
        k, v, k_cache, v_cache, slot_mapping, k.stride(0), v.stride(0), k_cache.stride(0),
        ROW=row, ROW_PAD=triton.next_power_of_2(row),
    )
