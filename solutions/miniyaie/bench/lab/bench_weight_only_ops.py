"""Timing, not a test: our C++ kernel over 8-bit blocks against torch's own weight-only int8 op on a CPU.

    python -m miniyaie.bench.lab.bench_weight_only_ops

torch ships `aten._weight_int8pack_mm` (int8 weights, one float scale per output channel, float inputs):
the obvious library to use instead of a kernel of our own. Both run the same int8-per-channel weights at
the bundled model's shapes (a projection, the down projection, the vocabulary head), one row (a decode
step of one request) and 16 rows (a batch), beside the float32 matmul; medians of 50 calls, microseconds.
"""
import time

import torch

from miniyaie.quant import QuantizedLinear, quantize_int8


def median_us(fn, calls: int = 50) -> float:
    for _ in range(5):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[calls // 2] * 1e6


def main():
    torch.manual_seed(0)
    print(f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    for n, k in [(1536, 576), (576, 1536), (49152, 576)]:
        weight = torch.randn(n, k) * 0.05
        blocks = quantize_int8(weight)
        ours, codes, scales = QuantizedLinear(blocks), blocks.codes.contiguous(), blocks.scales.float().view(-1)
        for rows in (1, 16):
            x = torch.randn(rows, k)
            assert torch.allclose(torch.ops.aten._weight_int8pack_mm(x, codes, scales), ours(x), atol=1e-4)
            torch_us = median_us(lambda: torch.ops.aten._weight_int8pack_mm(x, codes, scales))
            ours_us = median_us(lambda: ours(x))
            float_us = median_us(lambda: torch.nn.functional.linear(x, weight))
            print(f"[{rows} x {k}] @ [{n} x {k}]^T: torch int8pack {torch_us:8.1f} us, ours {ours_us:8.1f} us, "
                  f"float32 {float_us:8.1f} us")


if __name__ == "__main__":
    main()
