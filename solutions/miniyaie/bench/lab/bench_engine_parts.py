"""Timing, not a test: our engine on the random workload with parts of the cpu backend switched off.

    python -m miniyaie.bench.lab.bench_engine_parts --layer-ops torch --keep-memory no
    python -m miniyaie.bench.lab.bench_engine_parts                     # the defaults

One run per process (glibc's thresholds cannot be unset), so alternate the commands and
compare their seconds; page faults and kernel time are printed beside them.
"""
import argparse, resource
import torch
import miniyaie.backends.cpu.allocator as cpu_allocator
from miniyaie.bench.runners import run_engine
from miniyaie.bench.workloads import random_workload
from miniyaie.engine import EngineConfig, LLMEngine
from miniyaie.model import LayerOps, load_model, resolve_model_path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layer-ops", choices=["cpu", "torch"], default="cpu")
    parser.add_argument("--keep-memory", choices=["yes", "no"], default="yes")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.keep_memory == "no":
        cpu_allocator.keep_freed_memory = lambda: False  # before the engine sets it
    model = load_model(resolve_model_path(None))
    workload, config = random_workload(64, model.config.vocab_size), EngineConfig()
    engine = LLMEngine(model, config)
    if args.layer_ops == "torch":
        model.ops = LayerOps()
    before = resource.getrusage(resource.RUSAGE_SELF)
    result = run_engine(model, workload, config, "miniyaie", progress=False, engine=engine)
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(f"layer ops {args.layer_ops}, keep memory {args.keep_memory}: {result.seconds:.2f} s, "
          f"{after.ru_minflt - before.ru_minflt} page faults, {after.ru_stime - before.ru_stime:.2f} s in the kernel")


if __name__ == "__main__":
    main()
