"""By hand: how a live `miniyaie serve` answers while hostile or slow structured-output requests are prepared.

    python -m miniyaie.bench.lab.bench_hostile_requests health http://127.0.0.1:8000 [CASE ...]
        for each case: its status and seconds, the slowest /health (polled every 0.1 s while it is in
        flight) and one small plain request sent while it is in flight (the server must serve model "m":
        `miniyaie serve --served-model-name m`)
    python -m miniyaie.bench.lab.bench_hostile_requests sigterm [idle|compile|stream ...]
        starts `python -m miniyaie serve` (the tree on PYTHONPATH) for each case, puts a request in flight
        (compile: json_object on first use; stream: a 400-token stream), sends SIGTERM and times the exit
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx

CASES = {
    "regex a{1000000}": {"guided_regex": "a{1000000}"},
    "json maxItems 1e29": {"guided_json": {"type": "array", "items": {"type": "integer"}, "maxItems": 10**29}},
    "regex (a|b)*a(a|b){14}": {"guided_regex": "(a|b)*a(a|b){14}"},
    "enum of 5000 strings": {"guided_json": {"enum": [f"value-{i}" for i in range(5000)]}},
    "choice of 3000": {"guided_choice": [f"choice {i}" for i in range(3000)]},
    "array of bool maxItems 1000": {"guided_json": {"type": "array", "items": {"type": "boolean"}, "maxItems": 1000}},
    "string minLength 500": {"guided_json": {"type": "string", "minLength": 500}},
    "8 optional string props": {"guided_json": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(8)}}},
    "string maxLength 200": {"guided_json": {"type": "string", "maxLength": 200}},
    "json_object (first use)": {"response_format": {"type": "json_object"}},
}


def health_while_in_flight(url: str, names: list[str]) -> None:
    for name in names or list(CASES):
        body = {"model": "m", "prompt": "x", "max_tokens": 4, **CASES[name]}
        out = {}

        def hostile():
            started = time.perf_counter()
            try:
                reply = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
                out["status"] = reply.status_code
                out["message"] = reply.json().get("error", {}).get("message", "")[:90] if reply.status_code != 200 else ""
            except httpx.HTTPError as exc:
                out["status"] = repr(exc)[:60]
            out["seconds"] = round(time.perf_counter() - started, 3)

        thread = threading.Thread(target=hostile)
        thread.start()
        time.sleep(0.05)
        worst, polls, plain = 0.0, 0, None
        while thread.is_alive():
            started = time.perf_counter()
            httpx.get(f"{url}/health", timeout=300)
            worst, polls = max(worst, time.perf_counter() - started), polls + 1
            if plain is None and thread.is_alive():
                started = time.perf_counter()
                httpx.post(f"{url}/v1/completions", json={"model": "m", "prompt": "hello", "max_tokens": 4}, timeout=300)
                plain = round(time.perf_counter() - started, 3)
            time.sleep(0.1)
        thread.join()
        print(json.dumps({"case": name, **out, "health_max_s": round(worst, 3), "health_polls": polls, "plain_s": plain}),
              flush=True)


def sigterm_times(cases: list[str], port: int = 8012) -> None:
    url = f"http://127.0.0.1:{port}"
    for case in cases or ["idle", "compile", "stream"]:
        server = subprocess.Popen([sys.executable, "-m", "miniyaie", "serve", "--port", str(port), "--served-model-name", "m",
                                   "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline and server.poll() is None, "the server did not come up"
                time.sleep(0.5)
        body, stream, wait = None, False, 0.0
        if case == "compile":
            body, wait = {"model": "m", "prompt": "x", "max_tokens": 4, "response_format": {"type": "json_object"}}, 1.0
        elif case == "stream":
            body, stream, wait = {"model": "m", "prompt": "Tell a long story", "max_tokens": 400, "ignore_eos": True,
                                  "stream": True}, True, 3.0
        if body is not None:
            threading.Thread(target=send_and_read, args=(url, body, stream), daemon=True).start()
        time.sleep(float(os.environ.get("DELAY", wait)))
        started = time.perf_counter()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
            print(f"{case}: exited {time.perf_counter() - started:.2f} s after SIGTERM (rc {server.returncode})", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{case}: still running 60 s after SIGTERM", flush=True)
            server.kill()
            server.wait()


def send_and_read(url: str, body: dict, stream: bool) -> None:
    try:
        with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as reply:
            for _ in reply.iter_lines() if stream else ():
                pass
    except httpx.HTTPError:
        pass  # the server went away mid-answer: that is what is being measured


if __name__ == "__main__":
    if sys.argv[1:2] == ["health"]:
        health_while_in_flight(sys.argv[2], sys.argv[3:])
    elif sys.argv[1:2] == ["sigterm"]:
        sigterm_times(sys.argv[2:])
    else:
        sys.exit(__doc__)
