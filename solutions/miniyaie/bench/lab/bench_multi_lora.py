"""Timing, not a test: 8 LoRA adapters served in one batch against the base model alone and against merging in turn.

    python -m miniyaie.bench.lab.bench_multi_lora [--num-requests 32] [--adapters 8] [--rank 16] [--weights gguf]

The bundled SmolLM2-135M-Instruct in float32, or with `--weights gguf` in its GGUF file's own blocks (what the
engine serves it in by default on a CPU; decode steps then run in the CPU decode stack, adapters' deltas
included: backends/cpu/decode_stack_lora.py, and a fourth row (b') runs (b) with every step layer by layer,
as before the stack took adapters), or with `--weights gguf-a8` in those blocks with 8-bit activations (the
fastest base of chapter 10; (c) then rounds its activations too); `--adapters` random adapters made by peft (rank `--rank`,
every projection, A and B drawn at random: peft would start B at zero), saved in PEFT's format to a temporary
folder; the random workload (bench/workloads.py, seed 0: input U[32,256], output U[32,128], ignore_eos),
request i for adapter i mod 8. Three systems in one run, one after the other, each warmed first:
  (a) base alone       the same requests on the base model, one engine, no adapter;
  (b) multi-LoRA       one engine with the adapters (max_loras = their number: all resident), every request
                       with its own adapter, mixed in the same batches (what chapter 11 builds);
  (c) merge in turn    what serving without multi-LoRA does: the requests grouped by adapter; for each group
                       the adapter merged into the weights (W += scaling * B @ A), an engine over them (the cpu
                       backend packs the merged weights; with --weights gguf a copy of them put in int4 blocks,
                       the blocks nearest the GGUF's Q4_1, and int4-a8 with gguf-a8), the group run, the weights
                       restored.
Output tokens per second of each (all requests' output tokens / wall seconds, merging and packing included
in (c)), the load before each row, the ratios b/a and b/c, and how many requests (b) and (c) answer with the
same tokens (merged weights round differently: a near-tie may part them). The header names the CPU, its
features and the runtime. On 2 cores run it alone: a second process moves the figures.
"""
from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from miniyaie.backends.cpu.linear import unpack_linears
from miniyaie.backends.cpu.runtime import loaded as runtime_loaded
from miniyaie.backends.cpu.runtime import relaunch
from miniyaie.bench.llamacpp_env import cpu_flags
from miniyaie.bench.quality import cpu_name
from miniyaie.bench.workloads import Workload, random_workload
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams
from miniyaie.lora import load_adapter
from miniyaie.lora.adapter import PROJECTIONS
from miniyaie.model import load_model, resolve_model_path
from miniyaie.quant import quantize_model
from miniyaie.weights.engine_plugin import load_quantized
from miniyaie.weights.int8_activations import split_scheme, use_int8_activations

FEATURES = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
TARGETS = list(PROJECTIONS)


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def make_adapters(folder: Path, count: int, rank: int) -> dict[str, str]:
    """`count` random peft adapters of the bundled model, every projection at `rank`, saved under `folder`."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(resolve_model_path(None), dtype=torch.float32)
    peft_model = get_peft_model(base, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS, lora_dropout=0.0))
    paths = {}
    for i in range(count):
        torch.manual_seed(i)
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_A" in name or "lora_B" in name:
                    param.normal_(0, 0.02)
        paths[f"adapter-{i}"] = str(folder / f"adapter-{i}")
        peft_model.save_pretrained(paths[f"adapter-{i}"])
    return paths


def run(engine: LLMEngine, prompts: list[list[int]], outputs: list[int], adapters: list[str | None]) -> list[list[int]]:
    """Every request in flight together until all end; each request's tokens, in request order."""
    ids = [engine.add_request(p, SamplingParams(max_tokens=n, ignore_eos=True, adapter=a))
           for p, n, a in zip(prompts, outputs, adapters)]
    tokens = {rid: [] for rid in ids}
    while engine.has_unfinished():
        for event in engine.step():
            if event.error is not None:
                raise RuntimeError(f"request {event.request_id} failed: {event.error}")
            tokens[event.request_id].append(event.token_id)
    return [tokens[rid] for rid in ids]


def merge_in_turn(model, workload: Workload, adapter_of: list[str], paths: dict[str, str], rank: int,
                  blocks: str | None = None) -> list[list[int]]:
    """(c): for each adapter, its delta merged into the weights (put in the scheme `blocks`, e.g. "int4", if given),
    its requests run on an engine of their own, then the weights restored; each request's tokens."""
    layers = model.model.layers
    tokens: list[list[int] | None] = [None] * len(workload.prompts)
    for name, path in paths.items():
        mine = [i for i, a in enumerate(adapter_of) if a == name]
        adapter = load_adapter(path, model.config, rank, name)
        unpack_linears(model)  # the plain nn.Linear weights back (an engine packs them again)
        saved = {}
        with torch.no_grad():
            for (layer, module), _ in adapter.weights.items():
                weight = getattr(getattr(layers[layer], PROJECTIONS[module]), module).weight
                saved[(layer, module)] = weight.clone()
                weight += adapter.delta(layer, module).to(weight.dtype)
        served = model
        if blocks:
            served = copy.deepcopy(model)
            scheme, a8 = split_scheme(blocks)
            quantize_model(served, scheme)
            if a8:
                use_int8_activations(served)
        engine = LLMEngine(served, EngineConfig())
        out = run(engine, [workload.prompts[i] for i in mine], [workload.output_lens[i] for i in mine], [None] * len(mine))
        for i, t in zip(mine, out):
            tokens[i] = t
        del engine, served
        unpack_linears(model)
        with torch.no_grad():
            for (layer, module), weight in saved.items():
                getattr(getattr(layers[layer], PROJECTIONS[module]), module).weight.copy_(weight)
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description="multi-LoRA against the base model and against merging in turn")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--weights", choices=("float32", "gguf", "gguf-a8"), default="float32")
    args = parser.parse_args()
    blocks = {"float32": None, "gguf": "int4", "gguf-a8": "int4-a8"}[args.weights]  # what (c) puts merged weights in
    model = load_model(None)  # float32: what (c) merges into
    served = load_quantized(None, args.weights, torch.float32, "cpu").model if blocks else model  # what (a) and (b) serve
    workload = random_workload(args.num_requests, model.config.vocab_size)
    warm = random_workload(args.adapters, model.config.vocab_size, (16, 32), (4, 4), seed=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="miniyaie-multi-lora-") as folder:
        paths = make_adapters(Path(folder), args.adapters, args.rank)
        names = list(paths)
        adapter_of = [names[i % len(names)] for i in range(args.num_requests)]

        def timed(label: str, work) -> list[list[int]]:
            load_now = load_average()
            start = time.perf_counter()
            tokens = work()
            seconds = time.perf_counter() - start
            assert sum(map(len, tokens)) == workload.num_output_tokens, f"{label}: a request ended early"
            rows.append((label, seconds, workload.num_output_tokens / seconds, load_now))
            print(f"  {label}: {seconds:.1f} s", file=sys.stderr, flush=True)
            return tokens

        base = LLMEngine(served, EngineConfig())
        run(base, warm.prompts, warm.output_lens, [None] * len(warm.prompts))
        timed("(a) base model alone", lambda: run(base, workload.prompts, workload.output_lens, [None] * args.num_requests))
        del base
        merge_in_turn(model, warm, names, paths, args.rank, blocks)  # warm: every group's engine once
        merged = timed(f"(c) merge each adapter in turn ({args.adapters} groups)",
                       lambda: merge_in_turn(model, workload, adapter_of, paths, args.rank, blocks))
        unpack_linears(model)
        config = EngineConfig(lora_adapters=paths, max_loras=args.adapters, max_lora_rank=args.rank)
        multi = LLMEngine(served, config)  # wraps the model's projections (after this, the model serves adapters)
        run(multi, warm.prompts, warm.output_lens, names)  # every adapter loaded into its slot before the clock
        mixed = timed(f"(b) multi-LoRA, {args.adapters} adapters in one batch",
                      lambda: run(multi, workload.prompts, workload.output_lens, adapter_of))
        loads = multi.lora.stats()["loads"] if multi.lora is not None else "?"
        stack = multi.runner.decode_graphs
        in_stack = f"{stack.counters['lora_steps']} steps with adapter rows in the decode stack" if stack else "no decode stack"
        if stack is not None:  # (b) without the stack: every step layer by layer, as before the stack took adapters
            del multi
            layers = LLMEngine(served, config, decode_graphs="off")
            run(layers, warm.prompts, warm.output_lens, names)
            timed("(b') the same, every step layer by layer", lambda: run(layers, workload.prompts, workload.output_lens,
                                                                           adapter_of))
    rates = {label[:3]: rate for label, _, rate, _ in rows}
    flags = cpu_flags()
    print(f"{cpu_name()}; {os.cpu_count()} CPUs; {' '.join(f for f in FEATURES if f in flags)}; runtime: {runtime_loaded()}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{args.num_requests} random requests (input U[32,256], output U[32,128], {workload.num_output_tokens} output "
          f"tokens), {args.adapters} adapters of rank {args.rank} on every projection, request i on adapter i mod "
          f"{args.adapters}; weights: {f'{args.weights}: the GGUF blocks (Q4_1/Q8_0; (c): {blocks})' if blocks else 'float32'}")
    print(f"{'system':48} {'seconds':>8} {'out tok/s':>10}  load before")
    for label, seconds, rate, load_now in rows:
        print(f"{label:48} {seconds:8.1f} {rate:10.1f}  {load_now}")
    same = sum(a == b for a, b in zip(mixed, merged))
    print(f"b/a = {rates['(b)'] / rates['(a)']:.2f}, b/c = {rates['(b)'] / rates['(c)']:.2f}; (b) and (c) give the same "
          f"tokens for {same} of {args.num_requests} requests; adapter loads in (b): {loads}; (b): {in_stack}")
    layered = rates.get("(b'")
    if layered is not None:
        print(f"b'/a = {layered / rates['(a)']:.2f} (every step layer by layer)")


if __name__ == "__main__":
    relaunch(sys.argv[1:], module="miniyaie.bench.lab.bench_multi_lora")
    main()
