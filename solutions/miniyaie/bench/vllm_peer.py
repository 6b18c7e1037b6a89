"""vLLM as a peer of `miniyaie bench offline`: the same workload, run in vLLM's own environment.

vLLM's CPU wheel pins its own torch, so it runs in a child process with the
Python of a separate virtual environment (bench/vllm_env.py makes one). The
parent writes the workload as JSON, the child (bench/vllm_child.py) runs it
through `vllm.LLM` and writes back its time, token count and outputs. A
missing environment is a reason to skip the peer, said in the report; a
child that fails or returns the wrong number of tokens is a failed peer.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from miniyaie.bench.runners import Result
from miniyaie.bench.vllm_env import APT_STEP, ENV_VAR, child_env, tcmalloc_path
from miniyaie.bench.workloads import Workload

CHILD = Path(__file__).with_name("vllm_child.py")
LOG_TAIL_LINES = 15


class PeerSkipped(Exception):
    """The peer cannot run here (no environment): the report says why, the benchmark goes on."""


class PeerFailed(Exception):
    """The peer ran and failed, or returned something other than the workload asked for."""


def find_python(explicit: str | None) -> str:
    """The vLLM environment's Python: --vllm-python, else $MINIYAIE_VLLM_PYTHON; PeerSkipped if neither works."""
    python = explicit or os.environ.get(ENV_VAR)
    if not python:
        raise PeerSkipped(f"no vLLM environment: pass --vllm-python PATH or set {ENV_VAR} "
                          "(make one with `miniyaie bench setup-vllm DIR`)")
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise PeerSkipped(f"no vLLM environment: {python} is not an executable file "
                          "(make one with `miniyaie bench setup-vllm DIR`)")
    return python


def _log_tail(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:]) or "(no output)"


def default_dtype() -> str:
    """The dtype a user runs vLLM's CPU build in: bfloat16 where the CPU multiplies it natively (AVX512-BF16
    or AMX), float32 elsewhere (vLLM would emulate bfloat16 there)."""
    from miniyaie.bench.llamacpp_env import cpu_flags

    return "bfloat16" if cpu_flags() & {"avx512_bf16", "amx_bf16"} else "float32"


def run_vllm(workload: Workload, model: str, threads: int, enable_prefix_caching: bool, python: str | None = None,
             timeout: float = 3600.0, speculative: dict | None = None, sampling: dict | None = None,
             dtype: str | None = None) -> Result:
    """vLLM on the workload, exactly each request's output length; its outputs in stats["outputs"].
    `speculative`: vLLM's speculative_config (e.g. n-gram drafts), or None for none. `sampling`: the
    SamplingParams fields every request gets (temperature, top_p, top_k), or None for greedy. `dtype`:
    float32 or bfloat16 (default: default_dtype(), named in the system's name)."""
    python, dtype = find_python(python), dtype or default_dtype()
    with tempfile.TemporaryDirectory(prefix="miniyaie-vllm-") as tmp:
        request, result, log = Path(tmp, "request.json"), Path(tmp, "result.json"), Path(tmp, "child.log")
        request.write_text(json.dumps({"model": str(model), "dtype": dtype, "enable_prefix_caching": enable_prefix_caching,
                                       "prompts": workload.prompts, "output_lens": workload.output_lens,
                                       "speculative_config": speculative, "sampling": sampling}))
        with open(log, "w") as out:
            try:
                status = subprocess.run([python, str(CHILD), str(request), str(result)], stdout=out, stderr=subprocess.STDOUT,
                                        env=child_env(python, threads), cwd=tmp, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                raise PeerFailed(f"vLLM did not finish within {timeout:.0f} s:\n{_log_tail(log)}") from None
            except OSError as exc:  # e.g. a script whose interpreter line points nowhere
                raise PeerSkipped(f"cannot start {python}: {exc}") from None
        if status != 0:
            raise PeerFailed(f"vLLM exited with status {status}:\n{_log_tail(log)}")
        try:
            report = json.loads(result.read_text())
            outputs, seconds, system = report["outputs"], float(report["seconds"]), str(report["system"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise PeerFailed(f"vLLM's child wrote no usable result ({type(exc).__name__}: {exc}):\n{_log_tail(log)}") from None
    lengths = [len(o) for o in outputs]
    if lengths != workload.output_lens:
        wrong = sum(a != b for a, b in zip(lengths, workload.output_lens)) + abs(len(lengths) - len(workload.output_lens))
        raise PeerFailed(f"vLLM returned {sum(lengths)} tokens in {len(lengths)} outputs; the workload asks for "
                         f"{workload.num_output_tokens} in {len(workload.output_lens)} ({wrong} requests differ)")
    if not seconds > 0:
        raise PeerFailed(f"vLLM reported {seconds} seconds")
    stats = {"outputs": outputs, "startup_seconds": report.get("startup_seconds")}
    if tcmalloc_path() is None:  # it runs without, slower: the figure would sell vLLM short, so say so
        stats["note"] = f"ran without tcmalloc preloaded ({APT_STEP}); vLLM's CPU backend expects it"
    return Result(f"{system}, {dtype}", seconds, workload.num_output_tokens, workload.num_prompt_tokens, stats)
