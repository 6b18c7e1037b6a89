"""Timing, not a test: one request on the bundled model, float32 weights against the GGUF file's own blocks.

    python -m miniyaie.bench.lab.bench_weight_blocks [THREADS]

Both in one process, one after the other: the bytes of the weights, milliseconds per decoded token (a
192-token prompt, then 32 tokens, best of four; the prompt is cached after the first run and its prefill
timed alone and subtracted), and whether four prompts get the same greedy tokens.
"""
import sys

import torch

from miniyaie.bench.lab.bench_one_client import seconds_per_token
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.model import load
from miniyaie.quant import quantize_model, weight_bytes
from miniyaie.weights.engine_plugin import gguf_source


def main():
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    answers = {}
    for scheme in ("none", "gguf"):
        loaded = load(None)
        quantize_model(loaded.model, scheme, gguf_path=gguf_source(None))
        prompts = [loaded.tokenizer.encode(p) for p in ["The capital of France is", "Write a haiku about the sea.",
                                                         "def fibonacci(n):", "Once upon a time"]]
        engine = LLMEngine(loaded.model, EngineConfig())
        answers[scheme] = [o.token_ids for o in engine.generate(prompts, SamplingParams(max_tokens=32))]
        best = seconds_per_token(engine, 32, repeats=4)
        print(f"{scheme}: weights {weight_bytes(loaded.model) / 1e6:.0f} MB, {best * 1e3:.1f} ms per decoded token")
    same = [a == b for a, b in zip(answers["none"], answers["gguf"])]
    print(f"the same greedy tokens on {sum(same)} of {len(same)} prompts")


if __name__ == "__main__":
    main()
