"""Start the engine's process on Intel's OpenMP runtime and tcmalloc, as vLLM's CPU backend asks.

Why: a decode step of a few rows opens about 250 OpenMP parallel regions
(seven linear layers and attention in each of 30 layers), so the runtime's
cost to start and join a team is paid 250 times a token. torch's wheel
brings GNU libgomp, which keeps a pool of worker threads for each thread
that opens regions, and lets idle workers spin for the next region only
while it manages no more threads than there are CPUs. Under the server the
model is loaded on the main thread and run on the engine thread: two
pools, three threads on a 2-core machine, so after every region the
workers sleep and the kernel has to wake them for the next. Measured on
the course machine (2026-11-25, 2 threads, one-row linear layers of
SmolLM2): 31 us per layer when one thread opens all regions, 76 us on the
engine thread once the main thread has opened some, 31 to 38 us with
Intel's runtime (libiomp5, from the `intel-openmp` wheel), which also
joins its teams faster. tcmalloc keeps each thread's freed blocks at hand.
With both, one client's time per token under `miniyaie serve` went from
26.5 to 15.8 ms (`vllm bench serve`, p50).

Neither can be swapped in once the process runs (torch binds its OpenMP
calls when it is imported; memory from one malloc cannot be freed by
another), so the commands that run an engine start the process again with
both in LD_PRELOAD: `relaunch`. `MINIYAIE_CPU_RUNTIME=off` keeps the
defaults; `openmp` preloads the OpenMP runtime alone.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from pathlib import Path

ENV_VAR = "MINIYAIE_CPU_RUNTIME"  # auto (default) | openmp | off; the relaunched process sees "preloaded"
TCMALLOC_GLOBS = ("/usr/lib/*/libtcmalloc_minimal.so.4", "/usr/lib/libtcmalloc_minimal.so.4", "/usr/lib64/libtcmalloc_minimal.so.4")
CHOICES = ("auto", "openmp", "off")


def tcmalloc_path() -> str | None:
    """The system's tcmalloc (Debian and Ubuntu: apt-get install libtcmalloc-minimal4), if any."""
    for pattern in TCMALLOC_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def intel_openmp_path() -> str | None:
    """libiomp5.so of the `intel-openmp` wheel in this environment (it installs into <prefix>/lib), if any."""
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        path = Path(prefix) / "lib" / "libiomp5.so"
        if path.exists():
            return str(path)
    return None


def libraries_to_preload(choice: str) -> list[str]:
    """What `choice` preloads on this machine: Intel's OpenMP first (if found), then tcmalloc (auto only)."""
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}, not {choice!r}")
    if choice == "off" or not sys.platform.startswith("linux"):
        return []
    openmp = intel_openmp_path()
    if openmp is None:  # tcmalloc alone was not measured to help: keep the defaults
        return []
    tcmalloc = tcmalloc_path() if choice == "auto" else None
    return [openmp] + ([tcmalloc] if tcmalloc else [])


# ANCHOR: relaunch
def relaunch(argv: list[str], module: str = "miniyaie") -> None:
    """Replace this process by `python -m <module> *argv` with the libraries preloaded; return if nothing to do.

    Call it early: whatever this process has imported (torch too) is loaded again by the new one.
    """
    choice = os.environ.get(ENV_VAR, "auto")
    if choice == "preloaded":
        return
    libraries = libraries_to_preload(choice)
    if not libraries:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = ":".join(libraries + ([env["LD_PRELOAD"]] if env.get("LD_PRELOAD") else []))
    env[ENV_VAR] = "preloaded"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)
# ANCHOR_END: relaunch


def loaded() -> dict[str, str]:
    """The OpenMP runtime and malloc this process runs on, read from its memory map (Linux), for logs and stats."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return {"openmp": "unknown", "malloc": "unknown"}
    return {"openmp": "Intel libiomp5" if "libiomp5" in maps else "GNU libgomp" if "libgomp" in maps else "none yet",
            "malloc": "tcmalloc" if "libtcmalloc" in maps else "glibc"}


@functools.cache
def intel_openmp_loaded() -> bool:
    """True if OpenMP calls go to Intel's runtime (it was preloaded: it comes first in the symbol lookup).

    Read once per process: the runtime cannot change after start, and a step asks.
    """
    return "libiomp5" in os.environ.get("LD_PRELOAD", "") and loaded()["openmp"] == "Intel libiomp5"
