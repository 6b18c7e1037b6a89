"""How long a hostile or merely large pattern takes to compile (or to be refused), one subprocess per case.

    python -m miniyaie.bench.lab.bench_compile_limits [--timeout 60] [--source DIR]

Each case compiles one request's pattern against SmolLM2's vocabulary the way the server does before
admitting it (pattern -> byte DFA -> the first vocabulary walk) and prints the seconds it took and the
outcome: ok (with the automaton's states), a refusal (the 400's message), or a timeout. --source runs
another checkout's `miniyaie` (e.g. an older commit unpacked with `git archive`) for a before/after.
Not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

STRINGS = [f"item-{i:05d}" for i in range(5000)]
CASES = {
    "regex a{1000000}": {"regex": "a{1000000}"},
    "array maxItems 1e29": {"json_schema": {"type": "array", "items": {"type": "integer"}, "maxItems": 10**29}},
    "regex (a|b)*a(a|b){14}": {"regex": "(a|b)*a(a|b){14}"},
    "enum of 5,000 strings": {"json_schema": {"enum": STRINGS}},
    "guided_choice of 3,000": {"choice": STRINGS[:3000]},
    "booleans, maxItems 1000": {"json_schema": {"type": "array", "items": {"type": "boolean"}, "maxItems": 1000}},
    "string minLength 500": {"json_schema": {"type": "string", "minLength": 500}},
    "8 optional string properties": {"json_schema": {"type": "object", "properties": {
        f"p{i}": {"type": "string"} for i in range(8)}}},
    "string maxLength 200": {"json_schema": {"type": "string", "maxLength": 200}},
    "json_object": {"json_schema": "json_object"},
    "const of 5,000 characters": {"json_schema": {"const": "".join(STRINGS)[:5000]}},
}

CHILD = """
import json, sys, time
from miniyaie.engine import SamplingParams
from miniyaie.model.loader import bundled_model_dir
from miniyaie.structured import Constraints, Vocabulary
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
vocabulary = Vocabulary.from_tokenizer(tokenizer, [tokenizer.eos_token_id])
vocabulary.byte_matrix()
constraints = Constraints(vocabulary, 49152)
params = SamplingParams(**json.loads(sys.argv[1]))
started = time.perf_counter()
try:
    index = constraints.index(params)
    outcome = f"ok, {index.dfa.next_state.shape[0]} byte states"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"[:110]
print(json.dumps({"seconds": time.perf_counter() - started, "outcome": outcome}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--source", help="a directory holding another `miniyaie` package to measure instead")
    args = parser.parse_args()
    env = dict(os.environ, MINIYAIE_NUM_THREADS="1")
    if args.source:
        env["PYTHONPATH"] = args.source + os.pathsep + env.get("PYTHONPATH", "")
    for name, params in CASES.items():
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(params)], capture_output=True, text=True,
                                  timeout=args.timeout, env=env)
            result = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {
                "seconds": time.perf_counter() - started, "outcome": f"crashed: {done.stderr.strip()[-200:]}"}
        except subprocess.TimeoutExpired:
            result = {"seconds": args.timeout, "outcome": f"no answer in {args.timeout:.0f} s (killed)"}
        print(f"{name:32s} {result['seconds']:8.2f} s  {result['outcome']}", flush=True)


if __name__ == "__main__":
    main()
