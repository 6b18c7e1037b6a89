"""Compile every chapter 4 kernel for an H100 (sm_90) on a machine without a GPU.

The interpreter accepts things the GPU compiler rejects (tl.dot below 16
rows, mismatched types across branches, ...). Triton's wheel ships ptxas,
so the whole pipeline down to a cubin runs here. Run as a script with
TRITON_INTERPRET=0 (the kernels must be compiled, not interpreted); prints one
line per kernel and exits 1 if any fails.
"""

import importlib
import os
import sys

os.environ["TRITON_INTERPRET"] = "0"

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

H100 = GPUTarget("cuda", 90, 32)


def kernels(dt: str, dot):
    m = lambda name: importlib.import_module(f"miniyaie.kernels.{name}")  # noqa: E731
    paged = dict(k_cache_ptr=f"*{dt}", v_cache_ptr=f"*{dt}", block_tables_ptr="*i64", scale="fp32")
    yield m("decode_attention_kernel")._decode_split_kernel, dict(
        q_ptr=f"*{dt}", seq_lens_ptr="*i32", part_out_ptr="*fp32", part_lse_ptr="*fp32", **paged
    ), dict(GROUP=8, GROUP_PAD=16, HEAD_DIM=128, DIM_PAD=128, BLOCK_N=64, DOT=dot)
    yield m("decode_attention_kernel")._merge_splits_kernel, dict(part_out_ptr="*fp32", part_lse_ptr="*fp32", out_ptr=f"*{dt}"), dict(
        HEAD_DIM=128, DIM_PAD=128, SPLITS_PAD=8)
    yield m("extend_attention_kernel")._extend_kernel, dict(
        q_ptr=f"*{dt}", query_start_ptr="*i32", seq_lens_ptr="*i32", out_ptr=f"*{dt}", **paged
    ), dict(GROUP=8, HEAD_DIM=128, DIM_PAD=128, BLOCK_M=64, BLOCK_N=64, DOT=dot)
    yield m("store_kv_kernel")._store_kv_kernel, dict(
        k_ptr=f"*{dt}", v_ptr=f"*{dt}", k_cache_ptr=f"*{dt}", v_cache_ptr=f"*{dt}", slot_mapping_ptr="*i64"
    ), dict(ROW=1024, ROW_PAD=1024)
    yield m("rms_norm_kernel")._rms_norm_kernel, dict(
        x_ptr=f"*{dt}", residual_ptr=f"*{dt}", weight_ptr=f"*{dt}", out_ptr=f"*{dt}", summed_ptr=f"*{dt}", eps="fp32"
    ), dict(HIDDEN=4096, BLOCK=4096, HAS_RESIDUAL=True)
    yield m("rotary_kernel")._rotary_kernel, dict(q_ptr=f"*{dt}", k_ptr=f"*{dt}", cos_ptr="*fp32", sin_ptr="*fp32"), dict(
        NUM_Q_HEADS=32, NUM_K_HEADS=8, Q_HEADS_PAD=32, K_HEADS_PAD=8, HALF=64, HALF_PAD=64)
    yield m("activation")._silu_and_mul_kernel, dict(gate_ptr=f"*{dt}", up_ptr=f"*{dt}", out_ptr=f"*{dt}"), dict(BLOCK=1024)
    yield m("sampling")._sample_kernel, dict(
        logits_ptr="*fp32", temperature_ptr="*fp32", top_k_ptr="*i32", top_p_ptr="*fp32", min_p_ptr="*fp32",
        uniforms_ptr="*fp32", out_ptr="*i64"
    ), dict(BLOCK=4096)


def main() -> int:
    failed = 0
    for dt, dot in (("bf16", tl.bfloat16),):  # fp16 compiles the same code paths
        for fn, types, constants in kernels(dt, dot):
            signature = {name: "constexpr" if name in constants else types.get(name, "i32") for name in fn.arg_names}
            constexprs = {(fn.arg_names.index(name),): value for name, value in constants.items()}
            try:
                triton.compile(ASTSource(fn, signature, constexprs=constexprs), target=H100)
                print(f"ok     {fn.__name__} ({dt})")
            except Exception as exc:  # report every kernel, then fail
                failed += 1
                print(f"FAILED {fn.__name__} ({dt}): {type(exc).__name__}: {str(exc)[:2000]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
