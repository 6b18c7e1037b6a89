"""`miniyaie harness` on this machine: without a GPU it checks interpreter-sized cases, takes no timings, exits 0."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


def harness(*args, tmp_path):
    out = tmp_path / "h.json"
    proc = subprocess.run([sys.executable, "-m", "miniyaie", "harness", *args, "--json", str(out), "--plot", str(tmp_path / "h.png")],
                          capture_output=True, text=True, timeout=600)
    return proc, json.loads(out.read_text()) if out.exists() else None


@pytest.mark.task("4.4")
def test_harness_checks_every_kernel_and_writes_json_and_plot(tmp_path):
    proc, report = harness(tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {r["kernel"] for r in report["results"]} == {
        "decode_attention", "extend_attention", "store_kv", "rms_norm", "rotary", "silu_and_mul", "sample"}
    assert all(r["correct"] for r in report["results"])
    # SDPA, the attention kernels' baseline, was checked to compute the same thing (a causal flag, not a bool mask)
    assert all("sdpa" in r["baselines_checked"] for r in report["results"] if r["kernel"].endswith("_attention"))
    if not report["timed"]:
        assert "correctness only" in proc.stdout and not any("ms" in r for r in report["results"])
    assert (tmp_path / "h.png").stat().st_size > 0


@pytest.mark.ungraded
def test_harness_reports_a_wrong_kernel_and_fails(tmp_path):
    stub = Path(__file__).parents[2] / "chapters" / "miniyaie" / "kernels" / "activation.py"
    if "raise NotImplementedError" not in stub.read_text():
        pytest.skip("chapters/ holds a written silu_and_mul (a learner's), not the stub this test runs as a wrong kernel")
    proc, report = harness("--impl", "kernels=chapters", "--kernel", "silu_and_mul", tmp_path=tmp_path)
    assert proc.returncode == 1
    assert [r["correct"] for r in report["results"]] == [False]
    assert "NotImplementedError" in report["results"][0]["error"]


@pytest.mark.ungraded
def test_a_stub_that_a_gpu_refuses_to_compile_is_still_named_a_stub():
    """On a GPU, a kernel body that raises NotImplementedError is a compile error, not the raise itself."""
    from miniyaie.bench.kernel_harness import describe_failure

    class UnsupportedLanguageConstruct(Exception):  # the shape of Triton's compile error: position, then source
        pass

    compiled = describe_failure(UnsupportedLanguageConstruct('at 13:4:\n    raise NotImplementedError("Task 4.7")\n    ^'))
    assert compiled.startswith("UnsupportedLanguageConstruct: at 13:4:") and "the task's stub" in compiled
    assert describe_failure(NotImplementedError("Task 4.7: write the kernel")) == "NotImplementedError: Task 4.7: write the kernel"
    assert describe_failure(ValueError("bad grid\nmore")) == "ValueError: bad grid"
