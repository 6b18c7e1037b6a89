"""Timing, not a test: the sampler's share of an engine run, greedy and sampled, alternated in one process.

    python -m miniyaie.bench.lab.bench_sampled_share [--num-requests 16] [--rounds 2]

Runs the random workload (output 32:48 tokens) through LLMEngine three ways in turn: greedy,
sampled (temperature 0.7, top_p 0.9, top_k 50) on each row's top-k columns (engine/top_columns.py),
and sampled with that path switched off (whole rows); prints output tok/s and the share of the run
spent inside Sampler.__call__.
"""
import argparse
import time

import torch

from miniyaie.bench.workloads import SAMPLING, random_workload
from miniyaie.engine import EngineConfig, LLMEngine, SamplingParams, top_columns
from miniyaie.engine import sampler as sampler_module
from miniyaie.model import load_model, resolve_model_path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = load_model(resolve_model_path(None))
    workload = random_workload(args.num_requests, model.config.vocab_size, (32, 256), (32, 48))
    spent = [0.0]
    call = sampler_module.Sampler.__call__

    def timed(self, logits, rows):
        began = time.perf_counter()
        try:
            return call(self, logits, rows)
        finally:
            spent[0] += time.perf_counter() - began

    sampler_module.Sampler.__call__ = timed
    columns = top_columns.filter_on_columns
    for _ in range(args.rounds):
        for name, mode, narrow in (("greedy", "greedy", columns), ("sampled, top-k columns", "sampled", columns),
                                   ("sampled, whole rows", "sampled", lambda *a: None)):
            top_columns.filter_on_columns = narrow
            engine = LLMEngine(model, EngineConfig())
            for prompt, n in zip(workload.prompts, workload.output_lens):
                engine.add_request(prompt, SamplingParams(max_tokens=n, ignore_eos=True, **SAMPLING[mode]))
            spent[0], began = 0.0, time.perf_counter()
            while engine.has_unfinished():
                engine.step()
            seconds = time.perf_counter() - began
            print(f"{name}: {workload.num_output_tokens / seconds:.1f} out tok/s, {seconds:.1f} s, "
                  f"sampler {spent[0]:.2f} s ({spent[0] / seconds:.1%})", flush=True)
    top_columns.filter_on_columns = columns


if __name__ == "__main__":
    main()
