"""Profiling, not a test: per-operator time of our engine and of vLLM's CPU build on the random workload.

    MINIYAIE_VLLM_PYTHON=~/vllm-venv/bin/python python tests/ch05_engine/profile_ops.py [--out DIR]

torch.profiler over the whole timed run of each (ours in this process; vLLM with its engine
core in its own process, VLLM_ENABLE_V1_MULTIPROCESSING=0, so the profiler sees its model),
both on 2 threads, the tables sorted by self CPU time written to DIR/ours.txt and DIR/vllm.txt.
Our C++ kernels are called through ctypes, which the profiler does not see: their time is in
the run's seconds but in no row.
"""
import argparse, json, os, subprocess, time
from pathlib import Path
import torch
from miniyaie.bench.runners import run_engine
from miniyaie.bench.vllm_env import child_env
from miniyaie.bench.vllm_peer import find_python
from miniyaie.bench.workloads import random_workload
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import load_model, resolve_model_path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="profile-out")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(2)
    path = resolve_model_path(None)
    model = load_model(path)
    workload = random_workload(64, model.config.vocab_size)
    engine = LLMEngine(model, EngineConfig())
    start = time.perf_counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run_engine(model, workload, EngineConfig(), "miniyaie", progress=False, engine=engine)
    seconds = time.perf_counter() - start  # before the table: aggregating the events takes longer than the run
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30)
    (out / "ours.txt").write_text(f"seconds under the profiler: {seconds:.2f}\n{table}\n")
    request = out / "request.json"
    request.write_text(json.dumps({"model": str(path), "enable_prefix_caching": True,
                                   "prompts": workload.prompts, "output_lens": workload.output_lens}))
    python = find_python(None)
    subprocess.run([python, str(Path(__file__).with_name("profile_vllm_child.py")), str(request.resolve()),
                    str((out / "vllm.txt").resolve())], env=child_env(python, 2), cwd=out, check=True)
    print(f"tables in {out}/ours.txt and {out}/vllm.txt")


if __name__ == "__main__":
    main()
