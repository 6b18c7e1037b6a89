"""llama.cpp as a batch-1 peer of `miniyaie bench offline`: the bundled model's own GGUF file, in llama.cpp's environment.

llama-cpp-python is built for the host in a virtual environment of its own
(bench/llamacpp_env.py), so it runs in a child process with that Python:
this same file, run as a script, is the child, and imports nothing from
miniyaie at its top. The parent writes the workload as JSON; the child
loads `Llama(model_path=<GGUF>)` once (not timed) and runs the requests one
after another (llama.cpp's Python API has one sequence per context): for
each, `eval` of the prompt and a greedy first token (the prefill, timed
alone), then `eval` + greedy `sample` until exactly the request's output
length, whatever token comes (ignore_eos; the decode, timed alone).

    <llama.cpp venv>/bin/python llamacpp_peer.py REQUEST.json RESULT.json

    REQUEST  {"model_path": gguf, "threads": int, "n_ctx": int, "n_batch": int,
              "prompts": [[token ids]], "output_lens": [int]}
    RESULT   {"version": str, "outputs": [[token ids]], "prefill_seconds": [float],
              "decode_seconds": [float], "startup_seconds": float}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOG_TAIL_LINES = 15
N_BATCH = 512


def child_main(request_path: str, result_path: str) -> int:
    """The child: the workload through llama.cpp, greedy, exactly each request's output length."""
    with open(request_path) as f:
        request = json.load(f)
    started = time.perf_counter()
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=request["model_path"], n_ctx=request["n_ctx"], n_batch=request["n_batch"],
                n_threads=request["threads"], n_threads_batch=request["threads"], logits_all=False, verbose=False, seed=0)
    llm.eval(request["prompts"][0][:8])  # warm-up, not timed: first-touch of the weights and buffers
    llm.sample(temp=0.0, repeat_penalty=1.0)
    startup = time.perf_counter() - started
    outputs, prefill, decode = [], [], []
    for prompt, n in zip(request["prompts"], request["output_lens"]):
        llm.reset()  # the next eval drops the previous request's KV cache
        start = time.perf_counter()
        llm.eval(prompt)
        tokens = [llm.sample(temp=0.0, repeat_penalty=1.0)]  # greedy; penalties off
        first = time.perf_counter()
        while len(tokens) < n:  # no stop at EOS: exactly n tokens
            llm.eval(tokens[-1:])
            tokens.append(llm.sample(temp=0.0, repeat_penalty=1.0))
        end = time.perf_counter()
        outputs.append([int(t) for t in tokens])
        prefill.append(first - start)
        decode.append(end - first)
    with open(result_path, "w") as f:
        json.dump({"version": llama_cpp.__version__, "outputs": outputs, "prefill_seconds": prefill,
                   "decode_seconds": decode, "startup_seconds": startup}, f)
    return 0


def find_python(explicit: str | None) -> str:
    """llama.cpp's environment's Python: --llamacpp-python, else $MINIYAIE_LLAMACPP_PYTHON; PeerSkipped if neither works."""
    from miniyaie.bench.llamacpp_env import ENV_VAR
    from miniyaie.bench.vllm_peer import PeerSkipped

    python = explicit or os.environ.get(ENV_VAR)
    hint = "(make one with `miniyaie bench setup-llamacpp DIR`)"
    if not python:
        raise PeerSkipped(f"no llama.cpp environment: pass --llamacpp-python PATH or set {ENV_VAR} {hint}")
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise PeerSkipped(f"no llama.cpp environment: {python} is not an executable file {hint}")
    return python


def _log_tail(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:]) or "(no output)"


def label(num_requests: int) -> str:
    """The table's name for the peer (at most 34 characters, its column): batch 1; several requests one at a time."""
    return "llama.cpp gguf (batch 1)" if num_requests == 1 else "llama.cpp (batch 1, one at a time)"


def run_llamacpp(workload, threads: int, python: str | None = None, model: str | None = None,
                 model_path: str | None = None, timeout: float = 3600.0):
    """llama.cpp on the workload at batch 1 on the GGUF file of `model` (our name: only the bundled model has
    one) or on `model_path`; a Result whose seconds are prefill + decode of every request, with each request's
    tokens and decode tok/s in its stats. PeerSkipped without an environment or a GGUF file."""
    from miniyaie.bench.llamacpp_env import child_env
    from miniyaie.bench.runners import Result
    from miniyaie.bench.vllm_peer import PeerFailed, PeerSkipped
    from miniyaie.weights.engine_plugin import gguf_source

    python = find_python(python)
    if model_path is None:
        if gguf_source(model) is None:
            raise PeerSkipped(f"llama.cpp runs the bundled model's GGUF file; {model} has none")
        model_path = str(gguf_source(model))
    longest = max(len(p) + n for p, n in zip(workload.prompts, workload.output_lens))
    with tempfile.TemporaryDirectory(prefix="miniyaie-llamacpp-") as tmp:
        request, result, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "child.log")
        request.write_text(json.dumps({"model_path": model_path, "threads": threads, "n_ctx": longest + 16,
                                       "n_batch": N_BATCH, "prompts": workload.prompts,
                                       "output_lens": workload.output_lens}))
        with open(log, "w") as out:
            try:
                status = subprocess.run([python, os.path.abspath(__file__), str(request), str(result)], stdout=out,
                                        stderr=subprocess.STDOUT, env=child_env(threads), cwd=tmp,
                                        timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                raise PeerFailed(f"llama.cpp did not finish within {timeout:.0f} s:\n{_log_tail(log)}") from None
            except OSError as exc:
                raise PeerSkipped(f"cannot start {python}: {exc}") from None
        if status != 0:
            raise PeerFailed(f"llama.cpp exited with status {status}:\n{_log_tail(log)}")
        try:
            report = json.loads(result.read_text())
            outputs, prefill, decode = report["outputs"], report["prefill_seconds"], report["decode_seconds"]
            seconds = float(sum(prefill) + sum(decode))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PeerFailed(f"llama.cpp's child wrote no usable result ({type(exc).__name__}: {exc}):\n"
                             f"{_log_tail(log)}") from None
    lengths = [len(o) for o in outputs]
    if lengths != workload.output_lens:
        raise PeerFailed(f"llama.cpp returned {sum(lengths)} tokens in {len(lengths)} outputs; the workload asks for "
                         f"{workload.num_output_tokens} in {len(workload.output_lens)}")
    if not seconds > 0:
        raise PeerFailed(f"llama.cpp reported {seconds} seconds")
    decode_tok_s = [(n - 1) / s if n > 1 and s > 0 else None for n, s in zip(lengths, decode)]
    rates = [r for r in decode_tok_s if r]
    stats = {"outputs": outputs, "startup_seconds": report.get("startup_seconds"), "prefill_seconds": prefill,
             "decode_seconds": decode, "decode_tok_s": decode_tok_s, "version": report.get("version")}
    if rates:
        stats["note"] = (f"llama-cpp-python {report.get('version')}, decode alone {sum(rates) / len(rates):.1f} tok/s "
                         f"per request (mean), prefill {sum(prefill):.2f} s in all")
    return Result(label(len(outputs)), seconds, workload.num_output_tokens, workload.num_prompt_tokens, stats)


if __name__ == "__main__":  # the child, in llama.cpp's environment
    sys.path[:1] = [p for p in sys.path[:1] if Path(p or ".").resolve() != Path(__file__).resolve().parent]  # no bench/ on the path
    sys.exit(child_main(sys.argv[1], sys.argv[2]))
