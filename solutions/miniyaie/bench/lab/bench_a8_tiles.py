"""Timing, not a test: gguf-a8's linears at a step's row counts on AMX's 8-bit tiles and its bfloat16 tiles.

    python -m miniyaie.bench.lab.bench_a8_tiles [--threads 1]

The bundled model's layer 0 projections and head (its GGUF blocks, with 8-bit activations), each row count
on both tile paths in turn (quant_a8_dispatch.cpp forced), and torch's bfloat16 matmul over random
weights of the same shape (oneDNN on AMX: weights already in bfloat16, nothing to dequantize) beside them;
then a 512-token prefill through the engine both ways. Best process time of 15 calls.
"""
import argparse
import time

import torch

from miniyaie.backends.cpu import kernels
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.weights import int8_activations as a8
from miniyaie.weights.engine_plugin import load_quantized

INT8, BF16 = 1 << 40, 1  # bf16_rows for the dispatcher: never, always


def best_ms(call, repeats: int = 15) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        call()
        best = min(best, time.process_time() - start)
    return best * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    torch.set_num_threads(parser.parse_args().threads)
    library = kernels.load()
    assert library is not None and library.quant_bf16_amx_ready(), "needs the C++ kernels and a CPU with AMX-BF16"
    model = load_quantized(None, "gguf-a8", torch.float32, "cpu").model
    layer = model.model.layers[0]
    linears = {"q/k/v": layer.self_attn.q_proj.merged.linear, "o": layer.self_attn.o_proj,
               "gate/up": layer.mlp.gate_proj.merged.linear, "down": layer.mlp.down_proj, "head": model.lm_head}
    try:
        for name, linear in linears.items():
            for rows in (16, 64, 128, 512):
                x = torch.randn(rows, linear.in_features)
                w, xb = torch.randn(linear.out_features, linear.in_features, dtype=torch.bfloat16), x.bfloat16()
                library.quant_a8_set_amx_rows(a8.AMX_ROWS, INT8)
                int8 = best_ms(lambda: linear(x))
                library.quant_a8_set_amx_rows(a8.AMX_ROWS, BF16)
                bf16 = best_ms(lambda: linear(x))
                print(f"{name:8s} {linear.out_features}x{linear.in_features}, {rows:3d} rows: 8-bit tiles {int8:.3f} ms, "
                      f"bfloat16 tiles {bf16:.3f} ms ({int8 / bf16:.2f}x), torch bfloat16 {best_ms(lambda: xb @ w.T):.3f} ms")
        engine = LLMEngine(model, EngineConfig(enable_prefix_caching=False))
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(100, 40000, (n,), generator=g).tolist() for n in (248, 52, 72, 140)]
        prefill = lambda: engine.generate(prompts, SamplingParams(max_tokens=1, ignore_eos=True))  # noqa: E731
        times = {}
        for label, bf16_rows in (("8-bit tiles", INT8), ("bfloat16 tiles from 64 rows", a8.BF16_ROWS)):
            library.quant_a8_set_amx_rows(a8.AMX_ROWS, bf16_rows)
            times[label] = best_ms(prefill, repeats=6)
        print("a 512-token prefill (4 prompts):", ", ".join(f"{k} {v:.0f} ms" for k, v in times.items()))
    finally:
        library.quant_a8_set_amx_rows(a8.AMX_ROWS, a8.BF16_ROWS)


if __name__ == "__main__":
    main()
