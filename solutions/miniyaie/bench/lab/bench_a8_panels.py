"""Timing, not a test: gguf-a8's linears at a step's row counts on the 8-bit loop and on the VNNI panels.

    python -m miniyaie.bench.lab.bench_a8_panels [--threads 1]

For CPUs with AVX512-VNNI and no AMX (quant_a8_panels.cpp): the bundled model's layer 0 projections and its
head (its GGUF blocks), each row count on both paths in turn (quant_a8_dispatch.cpp's threshold moved), and
torch's bfloat16 matmul over random weights of the same shape beside them (oneDNN, weights already in
bfloat16, nothing to dequantize: what a bfloat16 engine runs). The two paths compute the same sums, so their
largest difference (relative to the largest output) is float32 rounding. Best process time of 15 calls
(bench_a8_tiles' best_ms); the crossover is where PANEL_ROWS (weights/int8_activations.py) comes from.
"""
import argparse

import torch

from miniyaie.backends.cpu import kernels
from miniyaie.bench.lab.bench_a8_tiles import best_ms
from miniyaie.weights import int8_activations as a8
from miniyaie.weights.engine_plugin import load_quantized

NEVER, ALWAYS = 1 << 40, 1  # thresholds for the dispatcher


def linears(model) -> dict:
    layer = model.model.layers[0]
    return {"q/k/v": layer.self_attn.q_proj.merged.linear, "o": layer.self_attn.o_proj,
            "gate/up": layer.mlp.gate_proj.merged.linear, "down": layer.mlp.down_proj, "head": model.lm_head}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    library = kernels.load()
    assert library is not None and library.quant_a8_panels_ready(), "needs the C++ kernels and a CPU with AVX512-VNNI"
    assert not library.quant_a8_amx_ready(), "with AMX the tiles take these steps: bench_a8_tiles times them"
    model = load_quantized(None, "gguf-a8", torch.float32, "cpu").model
    try:
        for name, linear in linears(model).items():
            for rows in (1, 2, 4, 8, 20, 64, 256):
                x = torch.randn(rows, linear.in_features)
                w, xb = torch.randn(linear.out_features, linear.in_features, dtype=torch.bfloat16), x.bfloat16()
                timed, outputs = {}, {}
                for label, threshold in (("8-bit loop", NEVER), ("VNNI panels", ALWAYS)):
                    library.quant_a8_set_panel_rows(threshold)
                    outputs[label] = linear(x)
                    timed[label] = best_ms(lambda: linear(x))
                difference = float((outputs["VNNI panels"] - outputs["8-bit loop"]).abs().max() / outputs["8-bit loop"].abs().max())
                print(f"{name:8s} {linear.out_features}x{linear.in_features}, {rows:3d} rows: "
                      + ", ".join(f"{k} {v:.3f} ms" for k, v in timed.items())
                      + f", torch bfloat16 {best_ms(lambda: xb @ w.T):.3f} ms (difference {difference:.1e})", flush=True)
    finally:
        library.quant_a8_set_panel_rows(a8.PANEL_ROWS)


if __name__ == "__main__":
    main()
