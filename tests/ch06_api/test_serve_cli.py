"""`miniyaie serve` in a subprocess answers the openai client; `miniyaie bench serve` measures a live server."""

import json
import os
import subprocess
import sys
import time

import openai
import pytest
from server_helpers import MODEL

pytestmark = [pytest.mark.task(f"6.{n}") for n in range(1, 9)]  # end to end, but for own marks


def test_miniyaie_serve_answers_the_openai_client(tiny_dir, tmp_path):
    from miniyaie.serving.server import bind

    sock = bind()  # find a free port, then hand it over
    port = sock.getsockname()[1]
    sock.close()
    log = open(tmp_path / "serve.log", "w+")
    env = {**os.environ, "MINIYAIE_API_KEY": "k"}
    config = tmp_path / "serve.yaml"
    config.write_text("sampling:\n  temperature: 0.0\n")  # the operator's default: greedy, over OpenAI's 1
    process = subprocess.Popen([sys.executable, "-m", "miniyaie", "serve", "--model", str(tiny_dir[0]), "--port", str(port),
                                "--served-model-name", MODEL, "--log-level", "warning", "--device", "cpu",
                                "--config", str(config)],
                               stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=0, timeout=60)
        deadline = time.monotonic() + 120
        while True:
            try:
                models = client.models.list()
                break
            except openai.APIConnectionError:
                assert process.poll() is None, open(tmp_path / "serve.log").read()
                assert time.monotonic() < deadline, "miniyaie serve did not come up"
                time.sleep(0.2)
        assert [m.id for m in models.data] == [MODEL]
        reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
                                               extra_body={"ignore_eos": True})
        assert reply.usage.completion_tokens == 3

        def text(seed, **fields):
            return client.completions.create(model=MODEL, prompt="hello", max_tokens=8, seed=seed,
                                             extra_body={"ignore_eos": True}, **fields).choices[0].text

        greedy = text(0, temperature=0)
        assert [text(seed) for seed in range(4)] == [greedy] * 4, "the config file's temperature 0 is the default"
        log.seek(0)
        assert f"Serving {MODEL} on http://127.0.0.1:{port}" in log.read()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_bench_serve_reports_every_concurrency(served, tmp_path, capsys):
    from miniyaie.cli import main

    _, server = served
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    status = main(["bench", "serve", "--url", server.url, "--concurrency", "1,3", "--num-requests", "4", "--max-tokens", "5",
                   "--prompt-words", "4", "--json", str(out), "--plot", str(png)])
    assert status == 0
    results = json.loads(out.read_text())["results"]
    assert [r["concurrency"] for r in results] == [1, 3]
    for r in results:
        assert r["failed"] == 0 and r["requests"] == 4
        assert r["completion_tokens"] == 4 * 5  # ignore_eos: every answer has max_tokens tokens
        assert r["output_tok_per_s"] > 0
        assert r["ttft"]["p50_ms"] <= r["ttft"]["p99_ms"] and r["e2e"]["p50_ms"] <= r["e2e"]["p99_ms"]
        assert r["ttft"]["mean_ms"] <= r["e2e"]["mean_ms"]
    assert png.stat().st_size > 0
    assert "out tok/s" in capsys.readouterr().out


@pytest.mark.ungraded
def test_bench_serve_says_when_the_server_is_unreachable(capsys):
    from miniyaie.serving.server import bind
    from miniyaie.cli import main

    sock = bind()
    port = sock.getsockname()[1]
    sock.close()
    assert main(["bench", "serve", "--url", f"http://127.0.0.1:{port}", "--num-requests", "1"]) == 2
    assert "cannot reach" in capsys.readouterr().err
    assert main(["bench", "serve", "--concurrency", "0,x"]) == 2
