"""Profiling, not a test: per-operator time of our engine and of vLLM's CPU build on one workload.

    MINIYAIE_VLLM_PYTHON=~/vllm-venv/bin/python python -m miniyaie.bench.lab.profile_ops \
        [--workload random|shared-prefix] [--out DIR]

torch.profiler over the whole timed run of each (ours in this process; vLLM with its engine
core in its own process, VLLM_ENABLE_V1_MULTIPROCESSING=0, so the profiler sees its model),
both on 2 threads, the tables sorted by self CPU time written to DIR/ours.txt and DIR/vllm.txt.
Each system runs as `miniyaie bench offline` runs it (the shared prefix with both prefix caches
on, ours with the LPM policy). Our C++ kernels are called through ctypes, which the profiler
does not see by itself: each call is wrapped in a `record_function` named `miniyaie::<kernel>`,
so they have rows of their own.
"""
import argparse, functools, json, subprocess, time
from pathlib import Path
import torch
from miniyaie.bench.runners import run_engine
from miniyaie.bench.vllm_env import child_env
from miniyaie.bench.vllm_peer import find_python
from miniyaie.bench.workloads import random_workload, shared_prefix_workload
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.backends.cpu import kernels as cpu_kernels, layer_ops as cpu_layer_ops
from miniyaie.model import load_model, resolve_model_path


# ANCHOR: recorded
def recorded(function, name: str):
    """`function`, each call a row of its own in the profiler's table."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        with torch.profiler.record_function(name):
            return function(*args, **kwargs)
    return call
# ANCHOR_END: recorded


def show_kernels() -> None:
    for name in ("paged_decode_attention", "paged_chunk_attention"):
        setattr(cpu_kernels, name, recorded(getattr(cpu_kernels, name), f"miniyaie::{name}"))
    ops = cpu_layer_ops.CpuLayerOps
    for name in ("rms_norm", "rotary", "_silu_mul_halves"):
        setattr(ops, name, recorded(getattr(ops, name), f"miniyaie::{name.strip('_')}"))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workload", choices=["random", "shared-prefix"], default="random")
    parser.add_argument("--out", default="profile-out")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "workload.json").write_text(json.dumps({"workload": args.workload}) + "\n")  # for plot_profile_ops.py
    torch.set_num_threads(2)
    path = resolve_model_path(None)
    model = load_model(path)
    if args.workload == "shared-prefix":  # as `miniyaie bench offline --workload shared-prefix` runs its best
        workload = shared_prefix_workload(4, 8, model.config.vocab_size, 512, 32, 32)
        config = EngineConfig(enable_prefix_caching=True, policy="lpm")
    else:
        workload, config = random_workload(64, model.config.vocab_size), EngineConfig()
    show_kernels()
    run_engine(model, workload, config, "warm", progress=False)  # kernels built, pages touched: as vLLM's warm-up
    engine = LLMEngine(model, config)
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        result = run_engine(model, workload, config, "miniyaie", progress=False, engine=engine)
    seconds = time.perf_counter() - start  # before the table: aggregating the events takes longer than the run
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    steps = len(result.stats["step_shapes"])
    (out / "ours.txt").write_text(f"seconds under the profiler: {seconds:.2f}, steps: {steps}\n{table}\n")
    request = out / "request.json"
    request.write_text(json.dumps({"model": str(path), "enable_prefix_caching": True,
                                   "prompts": workload.prompts, "output_lens": workload.output_lens}))
    python = find_python(None)
    subprocess.run([python, str(Path(__file__).with_name("profile_vllm_child.py")), str(request.resolve()),
                    str((out / "vllm.txt").resolve())], env=child_env(python, 2), cwd=out, check=True)
    print(f"tables in {out}/ours.txt and {out}/vllm.txt")


if __name__ == "__main__":
    main()
