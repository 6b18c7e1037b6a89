"""Timing, not a test: time to first token of a 4-token request sent 1 s after N long prompts, through `miniyaie serve`.

    python -m miniyaie.bench.lab.bench_ttft_behind_long                       # behind 1 and behind 3 prompts
    python -m miniyaie.bench.lab.bench_ttft_behind_long -- --long-prefill-token-threshold 0   # without the bound
    PYTHONPATH=<another checkout>/solutions python solutions/miniyaie/bench/lab/bench_ttft_behind_long.py   # its code instead

Starts a server (bundled SmolLM2, context 8,192), sends N random-token prompts
of --prompt-tokens tokens (max_tokens 1, distinct, so no prefix cache hits),
then a streaming 4-token request, and prints one JSON line per N: the short
request's TTFT and end-to-end seconds and the long requests' end-to-end
seconds. Arguments after `--` go to `miniyaie serve`.
"""
import argparse
import http.client
import json
import random
import signal
import subprocess
import threading
import time


def post(port: int, body: dict, timeout: float):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    return conn, conn.getresponse()


def random_ids(seed: int, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


def long_request(port, model, seed, n, timeout, results):
    started = time.perf_counter()
    conn, resp = post(port, {"model": model, "prompt": random_ids(seed, n), "max_tokens": 1, "ignore_eos": True}, timeout)
    resp.read()
    conn.close()
    results.append((resp.status, time.perf_counter() - started))


def short_request(port, model, seed, timeout):
    """(status, seconds to the first streamed chunk, seconds to the end)."""
    started, ttft = time.perf_counter(), None
    body = {"model": model, "prompt": random_ids(seed, 4), "max_tokens": 4, "ignore_eos": True, "stream": True}
    conn, resp = post(port, body, timeout)
    while line := resp.readline():
        if line.startswith(b"data: {") and ttft is None:
            ttft = time.perf_counter() - started
    conn.close()
    return resp.status, ttft, time.perf_counter() - started


def wait_until_healthy(port: int, server: subprocess.Popen) -> None:
    while server.poll() is None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"the server exited with status {server.returncode}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=8391)
    parser.add_argument("--behind", default="1,3", help="numbers of long prompts, comma-separated")
    parser.add_argument("--prompt-tokens", type=int, default=8000)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per request")
    parser.add_argument("serve_args", nargs="*", help="after --: flags for miniyaie serve")
    args = parser.parse_args()
    model = "SmolLM2-135M-Instruct"
    server = subprocess.Popen(["miniyaie", "serve", "--port", str(args.port), "--log-level", "warning", *args.serve_args])
    try:
        wait_until_healthy(args.port, server)
        short_request(args.port, model, 1, args.timeout)  # warm-up
        for n in (int(x) for x in args.behind.split(",")):
            results = []
            threads = [threading.Thread(target=long_request, args=(args.port, model, 100 * n + i, args.prompt_tokens,
                                                                  args.timeout, results)) for i in range(n)]
            for thread in threads:
                thread.start()
                time.sleep(0.05)
            time.sleep(1.0)
            status, ttft, e2e = short_request(args.port, model, 7 + n, args.timeout)
            for thread in threads:
                thread.join()
            print(json.dumps(dict(serve_args=args.serve_args, behind=n, short_status=status, short_ttft_s=ttft and round(ttft, 2),
                                  short_e2e_s=round(e2e, 2), long_e2e_s=sorted(round(s, 1) for _, s in results),
                                  long_status=[code for code, _ in results])), flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


if __name__ == "__main__":
    main()
