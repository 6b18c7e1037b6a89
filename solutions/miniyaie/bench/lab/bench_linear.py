"""Timing, not a test: SmolLM2's linear layers through F.linear (MKL) and through oneDNN with a packed weight.

    python -m miniyaie.bench.lab.bench_linear [--threads 2]

For each batch size (rows) and weight shape, the median of 30 calls after 5
warm-ups, each way, and the ratio; outputs are checked to agree first. The
cpu backend (miniyaie/backends/cpu/linear.py) runs every linear layer the second way.
"""
import argparse, statistics, time
import torch
import torch.nn.functional as F
from miniyaie.backends.cpu.linear import BATCH_HINT

SHAPES = {"q_proj / o_proj": (576, 576), "k_proj, v_proj": (192, 576), "gate_proj, up_proj": (1536, 576),
          "down_proj": (576, 1536), "lm_head": (49152, 576)}


def median_us(fn, calls=30, warmups=5):
    for _ in range(warmups):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{torch.__version__}, {args.threads} threads, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    for rows in (1, 16, 64, 256):
        for name, (out_features, in_features) in SHAPES.items():
            x, w = torch.randn(rows, in_features), torch.randn(out_features, in_features)
            packed = torch.ops.mkldnn._reorder_linear_weight(w, BATCH_HINT)
            onednn = lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")  # noqa: E731
            torch.testing.assert_close(onednn(), F.linear(x, w), rtol=1e-4, atol=1e-3)
            mkl, dnn = median_us(lambda: F.linear(x, w)), median_us(onednn)
            gflop = 2 * rows * out_features * in_features / 1e3
            print(f"rows {rows:4d}  {name:18s} F.linear {mkl:9.1f} us ({gflop / mkl:5.0f} GFLOP/s)   "
                  f"oneDNN packed {dnn:9.1f} us ({gflop / dnn:5.0f} GFLOP/s)   {mkl / dnn:4.1f}x")


if __name__ == "__main__":
    main()
