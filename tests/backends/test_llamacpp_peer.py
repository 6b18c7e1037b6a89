"""llama.cpp as a peer (`bench setup-llamacpp`, `bench offline --peers llamacpp`), without llama.cpp.

No network and no build: the setup is checked as a dry run with the CPU's
flags injected (AMX off in the CMake arguments exactly when the CPU has
AMX), the child is a fake Python that speaks the peer's JSON protocol, and
a missing environment must be a skipped peer with its reason, not a crash.
"""

import json
import sys

import pytest
from tiny_models import save_tiny_model

from miniyaie.bench import llamacpp_env
from miniyaie.bench.llamacpp_env import ENV_VAR, cmake_args, cpu_flags, setup_commands
from miniyaie.bench.llamacpp_peer import run_llamacpp
from miniyaie.bench.vllm_peer import PeerFailed, PeerSkipped
from miniyaie.bench.workloads import random_workload
from miniyaie.cli import main
from miniyaie.cli.main import build_parser

pytestmark = pytest.mark.ungraded

AMX_HOST = {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"}
AVX2_HOST = {"avx2", "fma", "f16c"}
AMX_OFF = ("-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF")


def install_command(flags):
    commands = setup_commands("/tmp/venv", "python3", flags)
    (install,) = [c for c in commands if "install" in c and any(a.startswith("llama-cpp-python==") for a in c)]
    return install


def test_amx_is_turned_off_in_the_build_exactly_when_the_cpu_has_it():
    install = install_command(AMX_HOST)
    assert install[0] == "env" and install[1].startswith("CMAKE_ARGS=")
    args = install[1].removeprefix("CMAKE_ARGS=").split()
    assert set(AMX_OFF) <= set(args) and "-DGGML_NATIVE=OFF" in args  # native would turn AMX back on
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX512_BF16=ON", "-DGGML_AVX2=ON"} <= set(args)
    assert "-DGGML_AVX512_VBMI=ON" not in args  # only what the CPU has
    assert "--no-cache-dir" in install  # a cached wheel would keep another build's flags
    plain = install_command(AVX2_HOST)
    assert plain[0] != "env" and not any("CMAKE_ARGS" in a or "AMX" in a for a in plain)
    assert cmake_args(AVX2_HOST) == []


def test_llamacpp_runs_without_what_our_commands_preload():
    base = {"LD_PRELOAD": "/x/libiomp5.so:/x/libtcmalloc_minimal.so.4", "MINIYAIE_CPU_RUNTIME": "preloaded",
            "PYTHONPATH": "/ours", "HOME": "/root"}
    env = llamacpp_env.child_env(2, base)
    assert "LD_PRELOAD" not in env and "MINIYAIE_CPU_RUNTIME" not in env and "PYTHONPATH" not in env, (
        "llama.cpp must run as its users run it, without our OpenMP runtime and malloc")
    assert env["OMP_NUM_THREADS"] == "2" and env["HOME"] == "/root"


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_tile amx_int8\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "amx_tile", "amx_int8"}
    assert cpu_flags(str(tmp_path / "none")) == set()


@pytest.mark.parametrize("flags, has_off", [(AMX_HOST, True), (AVX2_HOST, False)])
def test_setup_llamacpp_dry_run_prints_the_build_and_makes_nothing(tmp_path, capsys, monkeypatch, flags, has_off):
    monkeypatch.setattr(llamacpp_env, "cpu_flags", lambda path="/proc/cpuinfo": set(flags))
    venv = tmp_path / "llamacpp-venv"
    assert main(["bench", "setup-llamacpp", str(venv), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "llama-cpp-python==0.3.16" in out and ENV_VAR in out
    assert all(arg in out for arg in AMX_OFF) is has_off and ("GGML_NATIVE=OFF" in out) is has_off
    assert not venv.exists()


def test_peers_llamacpp_and_its_python_parse():
    args = build_parser().parse_args(["bench", "offline", "--peers", "llamacpp,hf-static", "--llamacpp-python", "/x/python"])
    assert args.peers == ["llamacpp", "hf-static"] and args.llamacpp_python == "/x/python"
    assert build_parser().parse_args(["bench", "offline"]).llamacpp_python is None


FAKE = """#!{python}
import json, os, sys
request = json.load(open(sys.argv[2]))
json.dump({{"request": request, "child": sys.argv[1], "omp": os.environ.get("OMP_NUM_THREADS")}}, open({seen!r}, "w"))
short = {short}
json.dump({{"version": "0.0.fake", "startup_seconds": 1.0,
           "outputs": [[5] * (n - short) for n in request["output_lens"]],
           "prefill_seconds": [0.01] * len(request["prompts"]), "decode_seconds": [0.1] * len(request["prompts"])}},
          open(sys.argv[3], "w"))
"""


def fake_python(tmp_path, short=0):
    path, seen = tmp_path / "bin" / "python", tmp_path / "seen.json"
    path.parent.mkdir(parents=True)
    path.write_text(FAKE.format(python=sys.executable, seen=str(seen), short=short))
    path.chmod(0o755)
    return str(path), seen


def test_the_child_gets_the_workload_and_the_peer_is_labelled_batch_one(tmp_path):
    python, seen = fake_python(tmp_path)
    workload = random_workload(3, 100, (3, 8), (4, 6))
    result = run_llamacpp(workload, 2, python, model_path="model.gguf")
    sent = json.loads(seen.read_text())
    assert sent["request"]["prompts"] == workload.prompts and sent["request"]["output_lens"] == workload.output_lens
    assert sent["request"]["threads"] == 2 and sent["omp"] == "2" and sent["child"].endswith("llamacpp_peer.py")
    assert "batch 1" in result.system and "one at a time" in result.system and len(result.system) <= 34
    assert result.seconds == pytest.approx(0.33) and result.output_tokens == workload.num_output_tokens
    assert result.stats["decode_tok_s"] == [pytest.approx((n - 1) / 0.1) for n in workload.output_lens]


def test_a_child_that_stops_early_fails_and_a_model_without_gguf_is_skipped(tmp_path):
    python, _ = fake_python(tmp_path, short=1)
    with pytest.raises(PeerFailed, match="tokens"):
        run_llamacpp(random_workload(2, 100, (3, 8), (4, 6)), 1, python, model_path="model.gguf")
    with pytest.raises(PeerSkipped, match="GGUF"):
        run_llamacpp(random_workload(2, 100, (3, 8), (4, 6)), 1, python, model=str(tmp_path))


def test_offline_reports_a_missing_environment_as_not_run(tmp_path, monkeypatch, capsys):
    model = tmp_path / "tiny"
    save_tiny_model("llama", model)
    monkeypatch.delenv(ENV_VAR, raising=False)
    out = tmp_path / "report.json"
    status = main(["bench", "offline", "--model", str(model), "--num-requests", "2", "--input-len", "3:6",
                   "--output-len", "2:3", "--threads", "1", "--no-floor", "--no-progress", "--machine", "10,10",
                   "--peers", "llamacpp", "--json", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert [row["system"] for row in report["rows"]] == ["miniyaie"]
    (peer,) = report["not_run"]
    assert peer["system"] == "llamacpp" and peer["status"] == "skipped"
    assert ENV_VAR in peer["reason"] and "setup-llamacpp" in peer["reason"]
    assert "llamacpp: skipped" in capsys.readouterr().out
