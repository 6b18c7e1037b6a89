"""Timing, not a test: gguf-a8's linears at a step's row counts on the 8-bit VNNI loop and on AVX512-BF16.

    python -m miniyaie.bench.lab.bench_a8_avx512 [--threads 1]

For CPUs with AVX512-BF16 and no AMX (quant_bf16_avx512.cpp): the bundled model's layer 0 projections (its GGUF
blocks), each row count on both paths in turn (quant_a8_dispatch.cpp's threshold moved), and torch's bfloat16
matmul over random weights of the same shape beside them (oneDNN, weights already in bfloat16, nothing to
dequantize). Each path's largest error against the exact `gguf` layer, relative to that layer's largest output.
Best process time of 10 calls; the crossover is where AVX512_BF16_ROWS (weights/int8_activations.py) comes from.
"""
import argparse
import time

import torch

from miniyaie.backends.cpu import kernels
from miniyaie.weights import int8_activations as a8
from miniyaie.weights.engine_plugin import load_quantized

NEVER, ALWAYS = 1 << 40, 1  # thresholds for the dispatcher


def best_ms(call, repeats: int = 10) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best * 1e3


def layer0(model) -> dict:
    layer = model.model.layers[0]
    return {"q/k/v": layer.self_attn.q_proj.merged.linear, "o": layer.self_attn.o_proj,
            "gate/up": layer.mlp.gate_proj.merged.linear, "down": layer.mlp.down_proj}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    library = kernels.load()
    assert library is not None and library.quant_bf16_avx512_ready(), "needs the C++ kernels and a CPU with AVX512-BF16"
    assert not library.quant_a8_amx_ready(), "with AMX the tiles take these steps: bench_a8_tiles times them"
    approximate = layer0(load_quantized(None, "gguf-a8", torch.float32, "cpu").model)
    exact = layer0(load_quantized(None, "gguf", torch.float32, "cpu").model)
    try:
        for name, linear in approximate.items():
            for rows in (4, 8, 16, 20, 64, 256):
                x = torch.randn(rows, linear.in_features)
                w, xb = torch.randn(linear.out_features, linear.in_features, dtype=torch.bfloat16), x.bfloat16()
                want = exact[name](x)
                timed = {}
                for label, threshold in (("VNNI", NEVER), ("AVX512-BF16", ALWAYS)):
                    library.quant_a8_set_bf16_rows(threshold)
                    error = float((linear(x) - want).abs().max() / want.abs().max())
                    timed[label] = f"{best_ms(lambda: linear(x)):.3f} ms (error {error:.4f})"
                print(f"{name:8s} {linear.out_features}x{linear.in_features}, {rows:3d} rows: "
                      + ", ".join(f"{k} {v}" for k, v in timed.items())
                      + f", torch bfloat16 {best_ms(lambda: xb @ w.T):.3f} ms", flush=True)
    finally:
        library.quant_a8_set_bf16_rows(a8.AVX512_BF16_ROWS)


if __name__ == "__main__":
    main()
