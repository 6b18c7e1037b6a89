"""Timing, not a test: chapter 0's element-wise layers (torch ops) against the cpu backend's one-pass C++ loops.

    python -m miniyaie.bench.lab.bench_layer_ops [--threads 1]

SmolLM2's shapes (hidden 576, 9 query and 3 KV heads of 64, MLP width 1536), at 1, 64 and
512 rows: the median of 300 calls after 5 warm-ups, each way; outputs are checked to agree
first. The SwiGLU rows time only the element-wise part (the projections are the same both ways).
"""
import argparse
import torch
from miniyaie.bench.lab.bench_linear import median_us
from miniyaie.model import LayerOps
from miniyaie.backends.cpu.layer_ops import CpuLayerOps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    torch_ops, loops = LayerOps(), CpuLayerOps()
    for rows in (1, 64, 512):
        x, residual, weight = torch.randn(rows, 576), torch.randn(rows, 576), torch.randn(576)
        q, k = torch.randn(rows, 9, 64), torch.randn(rows, 3, 64)
        half = torch.randn(rows, 32)
        cos, sin = torch.cat([half, half], -1).cos(), torch.cat([half, half], -1).sin()
        gate, up = torch.randn(rows, 1536), torch.randn(rows, 1536)
        work = gate.clone()
        torch.testing.assert_close(torch_ops.rms_norm(x, weight, 1e-5, residual)[0], loops.rms_norm(x, weight, 1e-5, residual)[0])
        torch.testing.assert_close(torch_ops.rotary(q, k, cos, sin)[0], loops.rotary(q.clone(), k.clone(), cos, sin)[0])

        def silu_loop():
            work.copy_(gate)  # in place: start from the same gate each time (the copy is timed both ways)
            loops.library.silu_mul_in_place(work.data_ptr(), up.data_ptr(), work.numel(), torch.get_num_threads())

        def silu_torch():
            work.copy_(gate)
            return torch.nn.functional.silu(work) * up

        cases = {
            "add + RMSNorm": (lambda: torch_ops.rms_norm(x, weight, 1e-5, residual), lambda: loops.rms_norm(x, weight, 1e-5, residual)),
            "RoPE, q and k": (lambda: torch_ops.rotary(q, k, cos, sin), lambda: loops.rotary(q, k, cos, sin)),
            "SiLU * up": (silu_torch, silu_loop),
        }
        for name, (with_torch, with_loop) in cases.items():
            a, b = median_us(with_torch, calls=300), median_us(with_loop, calls=300)
            print(f"{rows:4d} rows  {name:14s}  torch {a:8.1f} us   one pass {b:8.1f} us   {b / a:.2f}x")


if __name__ == "__main__":
    main()
