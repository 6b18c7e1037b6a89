"""llama.cpp (llama-cpp-python) in a virtual environment of its own, to run beside our engine as a batch-1 peer.

    python -m miniyaie.bench.llamacpp_env DIR [--python PY] [--dry-run]
    miniyaie bench setup-llamacpp DIR          (the same)

Its users get llama.cpp with `pip install llama-cpp-python`, which builds it
from source with CMake (about 20 minutes on 2 cores); so does this, pinned,
without pip's wheel cache (a cached wheel keeps the CMake flags it was built
with). llama.cpp's default build is native (`-march=native`). On a CPU with
AMX that turns on its AMX kernels (ggml-cpu/amx, compiled when gcc defines
__AMX_INT8__), and that build has been seen to crash in its first decode.
So when /proc/cpuinfo names `amx_tile`, this builds with GGML_NATIVE=OFF and
the host's other features asked for one by one (AVX2, FMA, F16C, BMI2, and
AVX512F/VBMI/VNNI/BF16 and AVX-VNNI where the CPU has them) with
GGML_AMX_TILE/INT8/BF16=OFF. Extra `-mno-amx-*` compiler flags on a native
build would not do: CMAKE_C_FLAGS come before ggml's `-march=native` on the
command line, whose expansion turns AMX back on. Without AMX the build is
llama.cpp's default, untouched.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

LLAMA_CPP_REQUIREMENT = "llama-cpp-python==0.3.16"
ENV_VAR = "MINIYAIE_LLAMACPP_PYTHON"  # the Python of the llama.cpp environment, when --llamacpp-python is not given

# /proc/cpuinfo flag -> the llama.cpp 0.3.16 (ggml) CMake option that compiles for it, for a non-native build
FEATURE_OPTIONS = (
    ("avx512f", "GGML_AVX512"),
    ("avx512vbmi", "GGML_AVX512_VBMI"),
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
    ("avx_vnni", "GGML_AVX_VNNI"),
)
BASE_OPTIONS = ("GGML_SSE42", "GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2")  # ggml's defaults off native
AMX_OFF = ("GGML_AMX_TILE=OFF", "GGML_AMX_INT8=OFF", "GGML_AMX_BF16=OFF")


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (the first `flags` line), empty where there is no /proc/cpuinfo."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def has_amx(flags: set[str]) -> bool:
    return "amx_tile" in flags


def cmake_args(flags: set[str]) -> list[str]:
    """The CMAKE_ARGS for this CPU: none (llama.cpp's native default) without AMX, else a build without AMX."""
    if not has_amx(flags):
        return []
    options = ["GGML_NATIVE=OFF", *(f"{name}=ON" for name in BASE_OPTIONS)]
    options += [f"{option}=ON" for flag, option in FEATURE_OPTIONS if flag in flags]
    options += list(AMX_OFF)
    return [f"-D{option}" for option in options]


def venv_python(venv: str | os.PathLike) -> Path:
    return Path(venv) / "bin" / "python"


def child_env(threads: int, base: dict | None = None) -> dict:
    """The environment for a process of the llama.cpp venv: our tree off its path, OpenMP at `threads`, and none
    of the libraries our own commands preload (backends/cpu/runtime.py): llama.cpp runs as its users run it."""
    from miniyaie.backends.cpu.runtime import ENV_VAR as RUNTIME_VAR

    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)  # our tree must not shadow the venv's packages
    env.pop("LD_PRELOAD", None)
    env.pop(RUNTIME_VAR, None)
    env["OMP_NUM_THREADS"] = str(threads)  # ggml's own threads are n_threads; this caps any OpenMP pool to the same
    return env


def setup_commands(venv: str, python: str, flags: set[str] | None = None) -> list[list[str]]:
    """The commands that make the environment; `flags` are the CPU's (default: this host's /proc/cpuinfo)."""
    flags = cpu_flags() if flags is None else flags
    pip = [str(venv_python(venv)), "-m", "pip"]
    install = pip + ["install", "--no-cache-dir", "--no-binary", "llama-cpp-python", "--verbose", LLAMA_CPP_REQUIREMENT]
    args = cmake_args(flags)
    if args:  # `env` so that the printed command is the one that runs
        install = ["env", "CMAKE_ARGS=" + " ".join(args)] + install
    return [
        [python, "-m", "venv", venv],
        pip + ["install", "--upgrade", "pip"],
        install,
    ]


def usage_notes(venv: str, flags: set[str]) -> str:
    python = os.path.abspath(venv_python(venv))
    built = "without AMX (GGML_NATIVE=OFF, AMX options off)" if has_amx(flags) else "natively (llama.cpp's default)"
    return "\n".join([
        f"llama.cpp environment: {venv}, {LLAMA_CPP_REQUIREMENT} built {built}",
        "",
        "Our benchmarks find it with --llamacpp-python or the environment variable:",
        f"    export {ENV_VAR}={python}",
        "    miniyaie bench offline --num-requests 1 --peers llamacpp",
    ])


def setup(venv: str, python: str = sys.executable, dry_run: bool = False, flags: set[str] | None = None) -> int:
    """Make the environment (or, with dry_run, print the commands that would); exit status."""
    flags = cpu_flags() if flags is None else flags
    if has_amx(flags):
        print("this CPU has AMX: building llama.cpp with its AMX kernels off (see miniyaie.bench.llamacpp_env)")
    for command in setup_commands(venv, python, flags):
        print("+", shlex.join(command), flush=True)
        if not dry_run and subprocess.run(command).returncode != 0:
            print(f"error: that command failed; {venv} is not ready", file=sys.stderr)
            return 1
    print(usage_notes(venv, flags))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("venv", metavar="DIR", help="the virtual environment to make (outside any repository)")
    p.add_argument("--python", default=sys.executable, help="the Python that makes it (default: this one)")
    p.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m miniyaie.bench.llamacpp_env", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    return setup(args.venv, args.python, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
