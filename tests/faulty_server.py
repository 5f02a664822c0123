"""A fault-injecting HTTP/1.1 server on 127.0.0.1 for testing every HTTP client of citeforge.

Each request is answered by its route (a fixed answer, a function of the request, or a forward to
an upstream server), unless a fault is queued for it. Faults are what real servers and networks do:

    429_retry_after  429 with `Retry-After: 1`
    429              429 without Retry-After
    500 502 503      server errors (503 without Retry-After)
    reset            headers and half the body, then a TCP reset (SO_LINGER 0)
    truncated        a correct Content-Length, half the body, then a clean close
    drip             headers, then the body one byte every `drip_interval` s (each gap shorter
                     than a read timeout, the whole longer than any sane deadline)
    redirect_loop    307 to the same target, forever

    with FaultyServer({"/img.png": (200, {"Content-Type": "image/png"}, png)}) as server:
        server.inject("/img.png", "reset")            # the next request only
        server.inject("/img.png", "503", times=None)  # every request from now on
        url = server.url("/img.png")

A fault is queued for a request target: the path with its query (`/pdf?id=f1`) or the path alone.
`server.log` lists (method, target, what was served) in order.
"""
from __future__ import annotations

import json
import socket
import struct
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler

from local_http import QuietServer
from typing import Callable

import requests

FAULTS = ("429_retry_after", "429", "500", "502", "503", "reset", "truncated", "drip", "redirect_loop")
Answer = tuple[int, dict, bytes]


class FaultyServer:
    def __init__(self, routes: dict[str, Answer | Callable[[str, str, dict, bytes], Answer]] | None = None,
                 upstream: str | None = None, drip_interval: float = 0.1):
        self.routes = dict(routes or {})
        self.upstream = upstream.rstrip("/") if upstream else None
        self.drip_interval = drip_interval
        self.log: list[tuple[str, str, str]] = []
        self._faults: dict[str, deque] = {}
        self._always: dict[str, str] = {}
        self._lock = threading.Lock()
        self._closing = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                owner._handle(self, body)

            do_GET = do_POST = do_HEAD = _serve

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    # set-up ------------------------------------------------------------------------------------
    def url(self, target: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{target}"

    def inject(self, target: str, fault: str, times: int | None = 1) -> None:
        """Serve `fault` to the next `times` requests of `target` (None: to every one)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; known: {FAULTS}")
        with self._lock:
            if times is None:
                self._always[target] = fault
            else:
                self._faults.setdefault(target, deque()).extend([fault] * times)

    def served(self, target: str) -> list[str]:
        return [what for _, t, what in self.log if t == target or t.split("?", 1)[0] == target]

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> "FaultyServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # serving -----------------------------------------------------------------------------------
    def _next_fault(self, target: str) -> str | None:
        path = target.split("?", 1)[0]
        with self._lock:
            for key in (target, path):
                if self._faults.get(key):
                    return self._faults[key].popleft()
            return self._always.get(target) or self._always.get(path)

    def _answer(self, method: str, target: str, headers: dict, body: bytes) -> Answer:
        route = self.routes.get(target) or self.routes.get(target.split("?", 1)[0])
        if callable(route):
            return route(method, target, headers, body)
        if route is not None:
            return route
        if self.upstream:
            up = requests.request(method, self.upstream + target, data=body or None, timeout=30, allow_redirects=False,
                                  headers={k: v for k, v in headers.items() if k.lower() in ("content-type", "authorization")})
            kept = {k: v for k, v in up.headers.items() if k.lower() in ("content-type", "location", "retry-after")}
            return up.status_code, kept, up.content
        return 404, {"Content-Type": "application/json"}, json.dumps({"error": f"no route {target}"}).encode()

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        target = handler.path
        fault = self._next_fault(target)
        with self._lock:
            self.log.append((handler.command, target, fault or "answer"))
        if fault in ("429_retry_after", "429", "500", "502", "503"):
            status = int(fault[:3])
            extra = {"Retry-After": "1"} if fault == "429_retry_after" else {}
            return self._send(handler, status, {"Content-Type": "application/json", **extra}, json.dumps({"error": fault}).encode())
        if fault == "redirect_loop":
            return self._send(handler, 307, {"Location": target}, b"")  # 307 keeps the method and body
        status, headers, data = self._answer(handler.command, target, dict(handler.headers), body)
        if fault is None:
            return self._send(handler, status, headers, data)
        data = data if len(data) >= 8 else data + b" " * (8 - len(data))  # something to cut in half
        self._head(handler, status, headers, len(data))
        if fault == "drip":
            for i in range(len(data)):
                if self._closing.wait(self.drip_interval):
                    break
                try:
                    handler.wfile.write(data[i : i + 1])
                    handler.wfile.flush()
                except OSError:  # the client gave up
                    break
            handler.close_connection = True
            return
        handler.wfile.write(data[: len(data) // 2])
        handler.wfile.flush()
        if fault == "reset":
            handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.close_connection = True  # "truncated": a clean close, fewer bytes than announced

    @staticmethod
    def _head(handler: BaseHTTPRequestHandler, status: int, headers: dict, length: int) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                handler.send_header(key, value)
        handler.send_header("Content-Length", str(length))
        handler.end_headers()

    def _send(self, handler: BaseHTTPRequestHandler, status: int, headers: dict, data: bytes) -> None:
        self._head(handler, status, headers, len(data))
        if handler.command != "HEAD":
            handler.wfile.write(data)
