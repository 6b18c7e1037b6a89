"""Runs `miniyaie` commands, each with its own MINIYAIE_IMPL, as forked children of one process.

    python learner_path_driver.py RUNS.json  ->  prints {name: {"rc", "stdout", "stderr"}} as JSON

RUNS.json maps a name to {"impl": MINIYAIE_IMPL, "argv": [...], "request": optional}. Each child sets
its MINIYAIE_IMPL and calls the CLI's `main(argv)`, the code path of the command (only the relaunch on
Intel's OpenMP is left out). The parent imports torch and transformers once, never a chapter package,
so each child still imports the chapters its MINIYAIE_IMPL selects: a run costs about a second
instead of a fresh interpreter's four. With "request", `serve` answers that one chat request through
an in-process client instead of listening on a port (the app and engine are the command's own).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
import traceback

import torch

if not torch.cuda.is_available():  # as tests/conftest.py: transformers' model code imports triton
    os.environ.setdefault("TRITON_INTERPRET", "1")
import fastapi.testclient  # noqa: E402,F401 - imported once here, used by the children
import transformers.models.llama.modeling_llama  # noqa: E402,F401

CHILD_TIMEOUT_S = 120


def answer_one_request(request: dict):
    """A stand-in for miniyaie.serving.server.serve: the app answers `request`; exit 1 unless it is a 200."""

    def serve(app, host="127.0.0.1", port=8000, log_level="info"):
        with fastapi.testclient.TestClient(app) as client:
            response = client.post("/v1/chat/completions", json=request)
        print(response.status_code, response.text)
        if response.status_code != 200:
            raise SystemExit(1)

    return serve


def child(run: dict) -> int:
    os.environ["MINIYAIE_IMPL"] = run["impl"]
    if run.get("request"):
        import miniyaie.serving.server

        miniyaie.serving.server.serve = answer_one_request(run["request"])
    from miniyaie.cli.main import main

    return main(run["argv"])


def run_forked(run: dict, folder: str, name: str) -> dict:
    paths = {stream: os.path.join(folder, f"{name}.{stream}") for stream in ("stdout", "stderr")}
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            for fd, stream in ((1, "stdout"), (2, "stderr")):
                os.dup2(os.open(paths[stream], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
            rc = child(run)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            rc = "timeout"
            break
        time.sleep(0.02)
    result = {"rc": rc}
    for stream, path in paths.items():
        with open(path) as f:
            result[stream] = f.read()
    return result


def main() -> None:
    with open(sys.argv[1]) as f:
        runs = json.load(f)
    with tempfile.TemporaryDirectory() as folder:
        results = {name: run_forked(run, folder, name) for name, run in runs.items()}
    print(json.dumps(results))


if __name__ == "__main__":
    main()
