"""Running the app under uvicorn: in the foreground (`miniyaie serve`) or in a thread (tests, notebooks)."""

from __future__ import annotations

import socket
import sys
import threading
import time

import uvicorn
from fastapi import FastAPI


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket; port 0 picks a free port (read it back with .getsockname())."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


GRACE_SECONDS = 2.0  # on SIGTERM or Ctrl-C, answers still streaming get this long to end, then they are cut


class Server(uvicorn.Server):
    """uvicorn's server that tells the app the moment it starts to shut down (`app.state.stopping()`, if the
    app has one: the API cancels every request still being prepared), so that no request can hold up
    the exit; answers still streaming get GRACE_SECONDS."""

    async def shutdown(self, sockets=None) -> None:
        stopping = getattr(getattr(self.config.app, "state", None), "stopping", None)
        if stopping is not None:
            stopping()
        await super().shutdown(sockets)


SWITCH_INTERVAL = 0.0005  # seconds; Python's default is 0.005


def serve(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM).

    Python work on the preparation threads (chat templates, tokenizing; pattern compiles run in worker
    processes) holds the GIL; the engine thread gives the GIL up around every tensor operation and must
    wait for it back each time. A shorter switch interval bounds that wait.
    """
    sys.setswitchinterval(SWITCH_INTERVAL)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=GRACE_SECONDS)
    Server(config).run()


class BackgroundServer:
    """`with BackgroundServer(app) as server:` serves on a free loopback port in a thread; `server.url`."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        self.sock = bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        self.server = Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=GRACE_SECONDS))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
