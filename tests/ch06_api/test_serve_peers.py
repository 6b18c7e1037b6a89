"""`python -m miniyaie.bench.serve_peers`: start a server, measure it, stop it; peers without an environment are skipped.

Only `miniyaie serve` on the tiny model runs here (the peers' own
environments are not installed in CI); what is checked is the procedure:
each server is started, measured at every concurrency, and stopped, and a
missing environment is said in the summary instead of crashing the run.
"""

import json
import socket

import pytest

from miniyaie.bench import serve_peers
from miniyaie.bench.vllm_env import ENV_VAR as VLLM_ENV_VAR

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks


def test_each_server_is_started_measured_and_stopped(tiny_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(VLLM_ENV_VAR, raising=False)
    monkeypatch.delenv(serve_peers.HF_ENV_VAR, raising=False)
    out = tmp_path / "run"
    status = serve_peers.main(["--out", str(out), "--peers", "miniyaie,hf,vllm", "--model", str(tiny_dir[0]),
                               "--concurrency", "1,2", "--num-requests", "2", "--max-tokens", "3", "--prompt-words", "4",
                               "--threads", "1", "--start-timeout", "120"])
    assert status == 0, capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    ours, hf, vllm = summary["peers"]
    assert ours["status"] == "ok" and [r["concurrency"] for r in ours["results"]] == [1, 2]
    assert all(r["failed"] == 0 and r["cached_share"] is not None for r in ours["results"])
    assert hf["status"].startswith("skipped") and serve_peers.HF_ENV_VAR in hf["status"]
    assert vllm["status"].startswith("skipped") and VLLM_ENV_VAR in vllm["status"]
    table = (out / "summary.md").read_text()
    assert "| miniyaie | 1 |" in table and "| miniyaie | 2 |" in table and "| vllm | skipped" in table
    assert (out / "serve_side_by_side.png").stat().st_size > 0
    port = int(ours["url"].rsplit(":", 1)[1])
    with socket.socket() as sock:  # the server is gone: nothing listens on its port any more
        assert sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.ungraded
def test_an_unknown_peer_is_refused(tmp_path):
    with pytest.raises(SystemExit) as exc:
        serve_peers.main(["--out", str(tmp_path), "--peers", "miniyaie,sglang"])
    assert exc.value.code == 2


@pytest.mark.ungraded
def test_vllm_bench_without_vllms_environment_is_refused_before_any_server_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(VLLM_ENV_VAR, raising=False)
    with pytest.raises(SystemExit) as exc:
        serve_peers.main(["--out", str(tmp_path), "--peers", "miniyaie", "--vllm-bench"])
    assert exc.value.code == 2
    assert "--vllm-bench runs vLLM's client" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing was started, so nothing was written"


@pytest.mark.ungraded
def test_vllm_bench_results_become_a_table_and_a_missing_one_is_named(tmp_path):
    result = {"completed": 12, "num_prompts": 12, "output_throughput": 6.68, "median_ttft_ms": 734.1,
              "median_tpot_ms": 112.07, "median_itl_ms": 82.36}  # the fields `vllm bench serve --save-result` writes
    (tmp_path / "miniyaie_vllm_bench_c1.json").write_text(json.dumps(result))
    table = serve_peers.vllm_bench_table(tmp_path, ["miniyaie"], [1, 4])
    assert "| miniyaie | 1 | 12/12 | 6.7 | 734 | 112 | 82 |" in table
    assert "| miniyaie | 4 | no result (see miniyaie_vllm_bench_c4.txt)" in table


@pytest.mark.ungraded
def test_a_server_whose_health_is_an_internal_error_is_given_up_at_once(tmp_path):
    import http.server
    import subprocess
    import sys
    import threading
    import time

    class Broken(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the handler's name)
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (tmp_path / "log").write_text("Traceback: NotImplementedError\n")
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="answers /health with 500"):
            serve_peers.wait_until_up(f"http://127.0.0.1:{server.server_port}", process, tmp_path / "log", timeout=60)
    finally:
        process.kill()
        server.shutdown()
    assert time.monotonic() - started < 10, "a broken server is given up at once, not after the start timeout"
