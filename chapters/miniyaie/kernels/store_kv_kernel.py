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
    # Idea: the slot mapping says where each token's row goes; the kernel is a masked row copy.
    # Stuck? `miniyaie hint 4.4` prints hints, one level at a time.
    # TODO(Task 4.4): The backend's step. Replace this line with your code.
    raise NotImplementedError("Chapter 4, Task 4: The backend's step — see book/src/ch04_triton_kernels.md")
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
