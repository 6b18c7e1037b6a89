"""Chapter 6's serving table in one command: each server started fresh, measured, stopped.

    python -m miniyaie.bench.serve_peers --out DIR [--peers miniyaie,hf,hf-cb,vllm]
        [--hf-python PATH] [--vllm-python PATH] [--vllm-bench]
        [--concurrency 1,4,16] [--num-requests 16] [--max-tokens 64] [--sampling greedy|sampled]
    python -m miniyaie.bench.serve_peers --setup-hf DIR     (transformers serve's environment)

One server at a time on loopback: `miniyaie serve`, `transformers serve` as
shipped and with --continuous-batching (in its own environment: the pinned
transformers[serving]), and `vllm serve` (vLLM's CPU build, in the
environment of bench/vllm_env.py). Each is started afresh, so no prefix
cache carries anything from another run, and measured by the same client
with the same prompts (`miniyaie bench serve --no-ignore-eos`, since
transformers serve refuses ignore_eos). With --vllm-bench, vLLM's own
client (`vllm bench serve`, random token prompts, new ones per concurrency)
measures ours and vLLM's too, as a second opinion. DIR gets each server's
log, each measurement's JSON and text, summary.md, summary.json and a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from miniyaie.bench import vllm_env
from miniyaie.bench.workloads import SAMPLING

PEERS = ("miniyaie", "hf", "hf-cb", "vllm")
NAME = "smollm2"  # the model name the servers that take one are given
HF_ENV_VAR = "MINIYAIE_HF_SERVE_PYTHON"
HF_REQUIREMENTS = (("torch==2.13.0",), ("transformers[serving]==5.23.0",))  # torch first: the CPU build, not CUDA's


class Skipped(Exception):
    """This peer cannot run here; the summary says why."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _venv_python(flag: str | None, env_var: str, what: str) -> str:
    python = flag or os.environ.get(env_var)
    if not python or not os.access(python, os.X_OK):
        raise Skipped(f"no {what} environment: pass its Python with the flag or set {env_var}"
                      + (f" ({python} is not executable)" if python else ""))
    return python


def server_command(peer: str, model: str, port: int, args) -> tuple[list[str], dict, str]:
    """(command, environment, model name to request) that start `peer` on 127.0.0.1:port."""
    threads = str(args.threads)
    if peer == "miniyaie":
        command = [sys.executable, "-m", "miniyaie", "serve", "--model", model, "--port", str(port), "--device", "cpu",
                   "--served-model-name", NAME, "--log-level", "warning"]
        return command, {**os.environ, "OMP_NUM_THREADS": threads}, NAME
    if peer in ("hf", "hf-cb"):
        python = _venv_python(args.hf_python, HF_ENV_VAR, "transformers serve")
        command = [str(Path(python).parent / "transformers"), "serve", model, "--device", "cpu", "--dtype", "float32",
                   "--host", "127.0.0.1", "--port", str(port)]
        if peer == "hf-cb":  # a KV cache of 1456 blocks of 16 tokens: 1 GiB of SmolLM2 in float32, as ours
            command += ["--continuous-batching", "--cb-block-size", "16", "--cb-num-blocks", "1456"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        return command, {**env, "OMP_NUM_THREADS": threads}, model
    python = _venv_python(args.vllm_python, vllm_env.ENV_VAR, "vLLM")
    command = [str(Path(python).parent / "vllm-cli"), "serve", model, "--dtype", "float32", "--host", "127.0.0.1",
               "--port", str(port), "--served-model-name", NAME, "--enable-prompt-tokens-details", "--enable-prefix-caching"]
    return command, vllm_env.child_env(python, args.threads), NAME


def wait_until_up(url: str, process: subprocess.Popen, log: Path, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}:\n{_tail(log)}")
        try:  # /health: transformers serve's /v1/models fails without a hub cache
            status = httpx.get(f"{url}/health", timeout=5).status_code
        except httpx.HTTPError:
            status = None  # not listening yet
        if status == 200:
            return
        if status == 500:  # up, and broken: waiting will not mend it
            raise RuntimeError(f"the server answers /health with 500 (an internal error):\n{_tail(log)}")
        time.sleep(1)
    raise RuntimeError(f"the server did not answer /health within {timeout:.0f} s:\n{_tail(log)}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group (its workers too), then SIGKILL if it lingers."""
    if process.poll() is None:
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            try:
                process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue


def _tail(path: Path, lines: int = 15) -> str:
    return "\n".join(path.read_text(errors="replace").strip().splitlines()[-lines:])


def _run_logged(command: list[str], log: Path, env: dict | None = None) -> int:
    print("+", shlex.join(command), flush=True)
    with open(log, "w") as out:
        status = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env).returncode
    print(log.read_text(errors="replace"), flush=True)
    return status


def measure(peer: str, url: str, name: str, args, out: Path) -> dict:
    """Our client against the server; with --vllm-bench, vLLM's client too (ours and vLLM's servers)."""
    client = [sys.executable, "-m", "miniyaie", "bench", "serve", "--url", url, "--model", name,
              "--concurrency", args.concurrency, "--num-requests", str(args.num_requests), "--max-tokens", str(args.max_tokens),
              "--prompt-words", str(args.prompt_words), "--no-ignore-eos", "--seed", str(args.seed),
              "--sampling", args.sampling, "--json", str(out / f"{peer}.json")]
    status = _run_logged(client, out / f"{peer}.txt", {**os.environ, "OMP_NUM_THREADS": "1"})
    result = {"peer": peer, "status": "ok" if status == 0 else f"client exited with {status}"}
    if (out / f"{peer}.json").exists():
        result["results"] = json.loads((out / f"{peer}.json").read_text())["results"]
    if args.vllm_bench and peer in ("miniyaie", "vllm"):
        python = _venv_python(args.vllm_python, vllm_env.ENV_VAR, "vLLM")
        for level in map(int, args.concurrency.split(",")):
            command = [str(Path(python).parent / "vllm-cli"), "bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
                       "--base-url", url, "--model", name, "--tokenizer", args.model, "--dataset-name", "random",
                       "--random-input-len", "192", "--random-range-ratio", "0.5", "--random-output-len", str(args.max_tokens),
                       "--ignore-eos", "--num-prompts", str(3 * args.num_requests), "--max-concurrency", str(level),
                       "--seed", str(args.seed + level),  # new prompts at every level
                       "--save-result", "--result-dir", str(out), "--result-filename", f"{peer}_vllm_bench_c{level}.json",
                       *(f"--{k.replace('_', '-')}={v}" for k, v in SAMPLING[args.sampling].items())]
            _run_logged(command, out / f"{peer}_vllm_bench_c{level}.txt", vllm_env.child_env(python, 1))
    return result


def run_peer(peer: str, args, out: Path) -> dict:
    try:
        command, env, name = server_command(peer, args.model, port := free_port(), args)
    except Skipped as exc:
        print(f"{peer}: skipped: {exc}", flush=True)
        return {"peer": peer, "status": f"skipped: {exc}"}
    log = out / f"{peer}.server.log"
    print(f"== {peer}: starting\n+ {shlex.join(command)}", flush=True)
    with open(log, "w") as server_out:
        process = subprocess.Popen(command, stdout=server_out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process, log, args.start_timeout)
        result = {**measure(peer, url, name, args, out), "url": url, "command": command}
        if process.poll() is not None:  # e.g. killed for memory: its figures are not a measurement of it
            result["status"] = f"failed: the server exited with status {process.returncode} during the run:\n{_tail(log)}"
        return result
    except RuntimeError as exc:
        print(f"{peer}: failed: {exc}", flush=True)
        return {"peer": peer, "status": f"failed: {exc}", "url": url, "command": command}
    finally:
        stop(process)
        print(f"== {peer}: stopped", flush=True)


def summary_table(results: list[dict]) -> str:
    lines = ["| server | clients | out tok/s | TTFT p50 ms | ITL p50 ms | e2e p50 ms | cached prompt tokens | failed |",
             "|---|---|---|---|---|---|---|---|"]
    for peer in results:
        if "results" not in peer:
            lines.append(f"| {peer['peer']} | {peer['status'].splitlines()[0]} | | | | | | |")
            continue
        for r in peer["results"]:
            cached = "not reported" if r.get("cached_share") is None else f"{r['cached_share']:.1%}"
            p50 = {k: "-" if r[k]["p50_ms"] is None else f"{r[k]['p50_ms']:.0f}" for k in ("ttft", "itl", "e2e")}
            lines.append(f"| {peer['peer']} | {r['concurrency']} | {r['output_tok_per_s']:.1f} | {p50['ttft']} | {p50['itl']} "
                         f"| {p50['e2e']} | {cached} | {r['failed']} |")
        if peer["status"] != "ok":
            lines.append(f"| {peer['peer']} | {peer['status'].splitlines()[0]} | | | | | | |")
    return "\n".join(lines)


def vllm_bench_table(out: Path, peers: list[str], levels: list[int]) -> str:
    """`vllm bench serve`'s own figures (192±50% random prompt tokens, ignore_eos), one row per server and level."""
    lines = ["| server | clients | completed | out tok/s | TTFT p50 ms | TPOT p50 ms | ITL p50 ms |", "|---|---|---|---|---|---|---|"]
    for peer in peers:
        for level in levels:
            path = out / f"{peer}_vllm_bench_c{level}.json"
            if not path.exists():
                lines.append(f"| {peer} | {level} | no result (see {path.with_suffix('.txt').name}) | | | | |")
                continue
            r = json.loads(path.read_text())
            lines.append(f"| {peer} | {level} | {r['completed']}/{r['num_prompts']} | {r['output_throughput']:.1f} "
                         f"| {r['median_ttft_ms']:.0f} | {r['median_tpot_ms']:.0f} | {r['median_itl_ms']:.0f} |")
    return "\n".join(lines)


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for peer in (p for p in results if "results" in p):
        conc = [r["concurrency"] for r in peer["results"]]
        left.plot(conc, [r["output_tok_per_s"] for r in peer["results"]], marker="o", label=peer["peer"])
        right.plot(conc, [r["ttft"]["p50_ms"] for r in peer["results"]], marker="o", label=peer["peer"])
    left.set(title="Output throughput", xlabel="concurrent streaming clients", ylabel="output tokens / s", xscale="log")
    right.set(title="Time to first token, p50", xlabel="concurrent streaming clients", ylabel="ms", xscale="log", yscale="log")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def setup_hf(venv: str) -> int:
    python = str(Path(venv) / "bin" / "python")
    for command in [[sys.executable, "-m", "venv", venv], [python, "-m", "pip", "install", "--upgrade", "pip"],
                    *([python, "-m", "pip", "install", *req] for req in HF_REQUIREMENTS)]:
        print("+", shlex.join(command), flush=True)
        if subprocess.run(command).returncode != 0:
            return 1
    print(f"transformers serve's environment is ready: pass --hf-python {os.path.abspath(python)} (or set {HF_ENV_VAR})")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m miniyaie.bench.serve_peers", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="serve-peers", help="folder for logs, JSON, summary.md and the plot")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, in order (default {','.join(PEERS)})")
    p.add_argument("--model", default=None, help="a local Hugging Face directory (default: the bundled SmolLM2, converted)")
    p.add_argument("--hf-python", default=None, help=f"Python of transformers serve's environment (default ${HF_ENV_VAR})")
    p.add_argument("--vllm-python", default=None, help=f"Python of vLLM's environment (default ${vllm_env.ENV_VAR})")
    p.add_argument("--vllm-bench", action="store_true", help="also run `vllm bench serve` against ours and vLLM's server")
    p.add_argument("--concurrency", default="1,4,16")
    p.add_argument("--num-requests", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--prompt-words", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sampling", choices=tuple(SAMPLING), default="greedy",
                   help="greedy, or sampled (temperature 0.7, top_p 0.9, top_k 50) for every server and client")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="threads of every server (default: all CPUs)")
    p.add_argument("--start-timeout", type=float, default=900.0, help="seconds a server may take to come up (vLLM compiles)")
    p.add_argument("--setup-hf", metavar="DIR", default=None, help="make transformers serve's environment in DIR and exit")
    args = p.parse_args(argv)
    if args.setup_hf:
        return setup_hf(args.setup_hf)
    peers = [x for x in args.peers.split(",") if x]
    if unknown := [x for x in peers if x not in PEERS]:
        p.error(f"unknown peer {unknown[0]!r}; choose from {', '.join(PEERS)}")
    if args.vllm_bench:  # said now, not after the first server has run its whole measurement
        try:
            _venv_python(args.vllm_python, vllm_env.ENV_VAR, "vLLM")
        except Skipped as exc:
            p.error(f"--vllm-bench runs vLLM's client: {exc}")
    if args.model is None:
        from miniyaie.model import resolve_model_path

        args.model = str(resolve_model_path(None))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    # stopped from outside (SIGTERM): still stop the server it started (run_peer's finally)
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        results = [run_peer(peer, args, out) for peer in peers]
    finally:
        signal.signal(signal.SIGTERM, previous)
    table = summary_table(results)
    (out / "summary.json").write_text(json.dumps({"started": started, "argv": sys.argv, "model": args.model,
                                                  "threads": args.threads, "peers": results}, indent=2))
    summary = f"Started {started}; `{shlex.join(sys.argv)}`\n\n{table}\n"
    ran = [r["peer"] for r in results if r["peer"] in ("miniyaie", "vllm") and "results" in r]
    if args.vllm_bench and ran:
        levels = [int(x) for x in args.concurrency.split(",")]
        summary += f"\n`vllm bench serve` against the same servers:\n\n{vllm_bench_table(out, ran, levels)}\n"
    (out / "summary.md").write_text(summary)
    if any("results" in r for r in results):
        plot(results, out / "serve_side_by_side.png")
    print(table)
    return 0 if all(r["status"] == "ok" or r["status"].startswith("skipped") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
