"""Timing, not a test: one request on the bundled model, ours (float32, the GGUF file's blocks, and those blocks
with 8-bit activations: gguf-a8) beside llama.cpp.

    MINIYAIE_LLAMACPP_PYTHON=<venv>/bin/python python -m miniyaie.bench.lab.bench_llamacpp_one_client

All in one run, one system after the other, at 2 threads and at 1: decode tokens per second of one request
(a 192-token prompt, 32 tokens, best of four; ours through bench_one_client.seconds_per_token, llama.cpp
through the bench peer, miniyaie bench setup-llamacpp), the load before each, and how many leading greedy
tokens llama.cpp shares with ours on four text prompts (a near-tie may part them: its dot products round
the activations to 8 bits). Each runs as its users run it: ours restarted on the OpenMP runtime and malloc
our commands preload (backends/cpu/runtime.py relaunch), llama.cpp without them (llamacpp_env.child_env).
The header names the CPU, its features that matter here and the runtime.
"""
import os
import subprocess
import sys

import torch

from miniyaie.backends.cpu.runtime import loaded as runtime_loaded
from miniyaie.backends.cpu.runtime import relaunch
from miniyaie.bench.lab.bench_one_client import seconds_per_token
from miniyaie.bench.llamacpp_env import cpu_flags
from miniyaie.bench.llamacpp_peer import run_llamacpp
from miniyaie.bench.quality import cpu_name
from miniyaie.bench.workloads import Workload
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.model import load
from miniyaie.quant import quantize_model
from miniyaie.weights.engine_plugin import gguf_source
from miniyaie.weights.int8_activations import split_scheme, use_int8_activations

PROMPT = [(17 * i) % 30000 + 100 for i in range(192)]
NAMES = {"none": "float32", "gguf": "gguf blocks", "gguf-a8": "gguf blocks, 8-bit activations"}
FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
TEXTS = ["The capital of France is", "Write a haiku about the sea.", "def fibonacci(n):", "Once upon a time"]


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1]


def leading_agreement(ours: list[list[int]], theirs: list[list[int]]) -> list[int]:
    return [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), min(len(x), len(y))) for x, y in zip(ours, theirs)]


def main():
    python = os.environ["MINIYAIE_LLAMACPP_PYTHON"]
    rows, answers, prompts = [], {}, None
    for threads in (2, 1):
        torch.set_num_threads(threads)
        for scheme in ("none", "gguf", "gguf-a8"):
            load_now = load_average()
            loaded = load(None)
            quantize_model(loaded.model, split_scheme(scheme)[0], gguf_path=gguf_source(None))
            if split_scheme(scheme)[1]:
                use_int8_activations(loaded.model)
            engine = LLMEngine(loaded.model, EngineConfig())
            if threads == 2:
                prompts = [loaded.tokenizer.encode(t) for t in TEXTS]
                answers[scheme] = [o.token_ids for o in engine.generate(prompts, SamplingParams(max_tokens=32, ignore_eos=True))]
            rows.append((f"ours, {NAMES[scheme]}", threads,
                         1 / seconds_per_token(engine, 32, repeats=4), load_now))
    for threads in (2, 1):
        load_now = load_average()
        result = run_llamacpp(Workload("random", [PROMPT] * 4, [33] * 4), threads, python)
        rows.append((f"llama.cpp {result.stats['version']}, the same file", threads, max(result.stats["decode_tok_s"]), load_now))
    theirs = run_llamacpp(Workload("text", prompts, [32] * 4), 2, python).stats["outputs"]
    flags = cpu_flags()
    print(f"{cpu_name()}; {os.cpu_count()} CPUs; {' '.join(f for f in FEATURES if f in flags)}; ours on {runtime_loaded()}")
    print(f"{'system':40} {'threads':>7} {'tok/s':>7} {'ms/token':>9}  load before")
    for name, threads, rate, load_now in rows:
        print(f"{name:40} {threads:7d} {rate:7.1f} {1e3 / rate:9.2f} {load_now}")
    for scheme, ours in answers.items():
        print(f"leading greedy tokens shared with llama.cpp ({scheme}, of 32): {leading_agreement(ours, theirs)}")


if __name__ == "__main__":
    relaunch(sys.argv[1:], module="miniyaie.bench.lab.bench_llamacpp_one_client")
    main()
