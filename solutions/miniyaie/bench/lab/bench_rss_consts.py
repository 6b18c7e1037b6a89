"""Resident memory of `miniyaie serve` around three distinct 5,000-character `const` schemas (chapter 8, Limits).

    python -m miniyaie.bench.lab.bench_rss_consts

Starts the server (bundled SmolLM2) on port 8765, prints its RSS (children included) at start, after each
request and when idle, with /stats' structured_output. Not a test: it measures.
"""
import json
import signal
import subprocess
import sys
import time

import httpx
import psutil


def main() -> None:
    port = 8765
    proc = subprocess.Popen([sys.executable, "-m", "miniyaie", "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        def rss():
            p = psutil.Process(proc.pid)
            return sum(q.memory_info().rss for q in [p] + p.children(recursive=True)) / 2**20
        model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
        base = rss()
        httpx.post(url + "/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 4}, timeout=600)
        warm = rss()
        print(f"start {base:.0f} MiB, after a plain request {warm:.0f} MiB", flush=True)
        for i in range(3):
            const = (f"{i}-" + "".join(f"word{j} " for j in range(2000)))[:5000]
            t = time.time()
            r = httpx.post(url + "/v1/completions", json={"model": model, "prompt": "Repeat:", "max_tokens": 3000,
                           "guided_json": {"const": const}}, timeout=900)
            body = r.json()
            ok = r.status_code == 200 and json.loads(body["choices"][0]["text"]) == const
            print(f"const {i}: status {r.status_code}, output equals the const: {ok}, {time.time() - t:.1f} s, "
                  f"RSS {rss():.0f} MiB, stats {httpx.get(url + '/stats').json().get('structured_output')}", flush=True)
        time.sleep(5)
        print(f"idle after: RSS {rss():.0f} MiB (start {base:.0f}, after a plain request {warm:.0f})")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    main()
