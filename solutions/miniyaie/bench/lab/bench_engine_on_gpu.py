"""Timing, not a test: the engine on a GPU with the triton backend against the torch one (chapter 4).

    python -m miniyaie.bench.lab.bench_engine_on_gpu --json OUT.json

SmolLM2-135M-Instruct (bundled; or --model DIR), bfloat16, engine defaults but the backend:
- throughput: the random workload of `miniyaie bench offline` (64 requests, seed 0, ignore_eos)
  and its shared-prefix workload (prefix cache on, LPM), once to warm up (Triton compiles each
  kernel the first time it sees a shape class), then timed;
- greedy equality: the first requests' tokens from each backend against transformers' `generate`
  on the same weights, in float32 (TF32 off) and in bfloat16, each request alone (no padding);
- host syncs: a profile of decode steps, counting the calls that make the CPU wait for the GPU
  (aten::item / _local_scalar_dense, cudaStreamSynchronize, device-to-host copies), per step.
On a CPU it runs with TRITON_INTERPRET=1 on a tiny shape only to check the script itself.
"""
import argparse
import dataclasses
import json
import time

import torch

from miniyaie.bench.runners import run_engine
from miniyaie.bench.workloads import random_workload, shared_prefix_workload
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import SamplingParams, load_model, resolve_model_path

SYNC_EVENTS = ("aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize", "Memcpy DtoH")


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed_run(model, workload, config) -> dict:
    """Output tok/s of one engine run (prefill included); start-up is not timed. Each step ends
    by copying its sampled tokens to the host, so the clock stops after the GPU's last kernel."""
    result = run_engine(model, workload, config, config.attention_backend, progress=False)
    return dict(seconds=round(result.seconds, 3), output_tokens=result.output_tokens,
                output_tok_s=round(result.tokens_per_second, 1), steps=result.stats["steps"],
                hit_rate=round(result.stats["hit_rate"], 3))


def greedy_tokens(model, backend: str, prompts, n: int) -> list[list[int]]:
    engine = LLMEngine(model, EngineConfig(attention_backend=backend))
    return [o.token_ids for o in engine.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))]


def hf_tokens(path, dtype, prompts, n: int, device: str) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p], device=device)
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                              min_new_tokens=n, pad_token_id=0, eos_token_id=None)
            out.append(gen[0, len(p):].tolist())
    del hf
    return out


def agreement(ours, theirs) -> dict:
    """How many requests are equal token for token, and where each other one first differs."""
    first = [next((i for i, (a, b) in enumerate(zip(x, y)) if a != b), None) for x, y in zip(ours, theirs)]
    return dict(equal=sum(f is None for f in first), of=len(first), first_difference=[f for f in first if f is not None])


def sync_profile(model, backend: str, batch: int, steps: int = 8) -> dict:
    """Per decode step: host syncs and launches, and the CPU time of one step, at `batch` rows."""
    from torch.profiler import ProfilerActivity, profile

    engine = LLMEngine(model, EngineConfig(attention_backend=backend))
    for i in range(batch):
        engine.add_request([(31 * i + 7 * j) % 20000 + 100 for j in range(256)], SamplingParams(max_tokens=64, ignore_eos=True))
    while engine.counters["computed_tokens"] < batch * 256 + batch:  # prefills done, decoding
        engine.step()
    for _ in range(3):
        engine.step()
    _sync()
    start = time.perf_counter()
    for _ in range(steps):
        engine.step()
    _sync()
    step_ms = (time.perf_counter() - start) / steps * 1e3
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            engine.step()
        _sync()
    events = prof.key_averages()
    counts = {e.key: e.count / steps for e in events if any(s in e.key for s in SYNC_EVENTS)}
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx")) / steps
    gpu_us = sum(e.self_device_time_total for e in events if str(e.device_type).endswith("CUDA")) / steps
    table = events.table(sort_by="self_cpu_time_total", row_limit=25)
    return dict(batch=batch, step_ms=round(step_ms, 3), gpu_busy_ms=round(gpu_us / 1e3, 3),
                launches_per_step=launches, syncs_per_step=counts, table=table)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=None)
    parser.add_argument("--backends", default="triton,torch")
    parser.add_argument("--greedy-requests", type=int, default=8)
    parser.add_argument("--greedy-tokens", type=int, default=32)
    parser.add_argument("--requests", type=int, default=64, help="random workload size (shared prefix: 4 groups of requests/8)")
    parser.add_argument("--device", default="cuda", help="cpu: only to check this script (TRITON_INTERPRET=1, tiny sizes)")
    parser.add_argument("--profile-batches", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    backends = args.backends.split(",")
    path = resolve_model_path(args.model)
    device = args.device
    report = dict(device=torch.cuda.get_device_name() if device == "cuda" else device, torch=torch.__version__, model=str(path), backends={})
    import triton

    report["triton"] = triton.__version__
    bf16 = load_model(path, dtype=torch.bfloat16, device=device)
    vocab = bf16.config.vocab_size
    workloads = dict(random=(random_workload(args.requests, vocab), EngineConfig()),
                     shared_prefix=(shared_prefix_workload(4, max(1, args.requests // 8), vocab), EngineConfig(policy="lpm")))
    for backend in backends:
        row = report["backends"][backend] = {}
        for name, (workload, config) in workloads.items():
            config = dataclasses.replace(config, attention_backend=backend)
            timed_run(bf16, workload, config)  # warm-up: compiles
            row[name] = timed_run(bf16, workload, config)
            print(backend, name, row[name], flush=True)
        for batch in args.profile_batches:
            profile_row = sync_profile(bf16, backend, batch)
            print(backend, f"decode batch {batch}:", {k: v for k, v in profile_row.items() if k != "table"}, flush=True)
            print(profile_row["table"], flush=True)
            row[f"decode_batch_{batch}"] = profile_row
    prompts = random_workload(args.greedy_requests, vocab, seed=1).prompts
    torch.backends.cuda.matmul.allow_tf32 = False  # transformers' float32 matmuls in full float32, as ours
    for label, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        model = bf16 if dtype is torch.bfloat16 else load_model(path, dtype=dtype, device=device)
        reference = hf_tokens(path, dtype, prompts, args.greedy_tokens, device)
        report[f"greedy_{label}"] = {b: agreement(greedy_tokens(model, b, prompts, args.greedy_tokens), reference) for b in backends}
        print("greedy", label, report[f"greedy_{label}"], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print("wrote", args.json)


if __name__ == "__main__":
    main()
