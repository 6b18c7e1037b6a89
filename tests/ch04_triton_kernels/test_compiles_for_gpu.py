"""Every kernel compiles for an H100 (sm_90) with the GPU compiler, even on a machine without a GPU."""

import os
import subprocess
import sys

import pytest


@pytest.mark.task("4.4")
def test_every_kernel_compiles_for_sm90():
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run([sys.executable, "-m", "miniyaie.bench.lab.compile_for_gpu"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok ") == 8
