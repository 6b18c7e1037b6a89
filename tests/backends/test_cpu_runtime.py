"""The commands that run an engine start again on Intel's OpenMP (and tcmalloc where the system has it).

Same text either way; MINIYAIE_CPU_RUNTIME=off keeps torch's own runtime; a bad value is a usage error.
"""

import os
import subprocess
import sys
import threading

import pytest
import torch
from tiny_tokenizer import save_tiny_chat_model

from miniyaie.backends import step_threads
from miniyaie.backends.cpu import runtime as cpu_runtime

pytestmark = pytest.mark.ungraded


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tiny-chat-runtime")
    save_tiny_chat_model(directory)
    return str(directory)


def run_generate(model: str, runtime: str) -> subprocess.CompletedProcess:
    env = {**os.environ, cpu_runtime.ENV_VAR: runtime, "OMP_NUM_THREADS": "2"}
    env.pop("LD_PRELOAD", None)
    return subprocess.run([sys.executable, "-m", "miniyaie", "generate", "--model", model, "--device", "cpu",
                           "--max-tokens", "8", "Hello there"], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(cpu_runtime.intel_openmp_path() is None, reason="intel-openmp is installed on x86-64 Linux only")
def test_generate_runs_on_intel_openmp_and_prints_what_torchs_own_runtime_prints(chat_model):
    fast, plain = run_generate(chat_model, "auto"), run_generate(chat_model, "off")
    assert fast.returncode == 0 and plain.returncode == 0, fast.stderr[-2000:] + plain.stderr[-2000:]
    assert "OpenMP: Intel libiomp5" in fast.stderr, f"the command was not relaunched on Intel's OpenMP: {fast.stderr}"
    malloc = "tcmalloc" if cpu_runtime.tcmalloc_path() else "glibc"
    assert f"malloc: {malloc}" in fast.stderr, fast.stderr
    assert "OpenMP: GNU libgomp, malloc: glibc" in plain.stderr, f"{cpu_runtime.ENV_VAR}=off must keep the defaults"
    assert fast.stdout == plain.stdout and fast.stdout.startswith("Hello there"), (fast.stdout, plain.stdout)


def test_an_unknown_runtime_is_a_usage_error_that_names_the_choices(chat_model):
    bad = run_generate(chat_model, "fast")
    assert bad.returncode == 2
    assert "MINIYAIE_CPU_RUNTIME must be one of auto, openmp, off, not 'fast'" in bad.stderr, bad.stderr
    with pytest.raises(ValueError, match="MINIYAIE_CPU_RUNTIME"):
        cpu_runtime.libraries_to_preload("fast")


def test_off_preloads_nothing_and_openmp_leaves_malloc_alone():
    assert cpu_runtime.libraries_to_preload("off") == []
    openmp = cpu_runtime.libraries_to_preload("openmp")
    assert openmp == ([cpu_runtime.intel_openmp_path()] if cpu_runtime.intel_openmp_path() else [])


def test_on_intel_openmp_small_steps_off_the_main_thread_keep_every_thread(monkeypatch):
    monkeypatch.setattr(step_threads, "intel_openmp_loaded", lambda: True)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    seen = {}

    def engine_thread():
        with step_threads.threads_for_step(1, "cpu"):
            seen["small"] = torch.get_num_threads()

    try:
        worker = threading.Thread(target=engine_thread)
        worker.start()
        worker.join()
    finally:
        torch.set_num_threads(before)
    assert seen == {"small": 2}, "Intel's runtime has no cost per parallel region to avoid: keep both threads"
