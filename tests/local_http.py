"""The harness the tests' stand-in HTTP servers share (model servers, the Reddit API, a judge): a
request handler that logs nothing and answers with a length, and a server that runs a handler class
on 127.0.0.1, on a free port, in a thread of its own until it is closed.

    class Handler(QuietHandler):
        def do_POST(self):
            self.answer(200, json.dumps({...}).encode())

    with LocalServer(Handler) as server:
        requests.post(server.url + "/v1/chat/completions", ...)

tests/faulty_server.py is apart: it answers with resets, truncations and drips, below this level;
`RawServer` writes whatever bytes a test wants."""
from __future__ import annotations

import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # the test's output, not a request log
        pass

    def answer(self, status: int, data: bytes, content_type: str = "application/json", headers=()) -> None:
        """`data` with its Content-Length and `headers` (pairs or a dict's items)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers:
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class QuietServer(ThreadingHTTPServer):
    """A threaded server that says nothing when a client hangs up (a test's timeout, a client
    closing a kept-alive connection): socketserver would print the ConnectionResetError's traceback
    into the suite's output. Any other error in a handler is printed as before."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class LocalServer:
    """`handler` served on 127.0.0.1 by a daemon thread; `url` is http://127.0.0.1:<port>."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]):
        self.httpd = QuietServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RawServer:
    """A server below HTTP for answers no handler would send: headers that never end, a repeated
    Content-Length, bytes dripped one at a time. Each connection's request is read, then
    `answer(conn, closing)` writes what it likes (`closing` is set when the test ends, for an answer
    that would go on forever); one connection at a time. `url` is http://127.0.0.1:<port>."""

    def __init__(self, answer):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.closing = threading.Event()

        def serve():
            while not self.closing.is_set():
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    continue
                with conn:
                    conn.recv(65536)
                    try:
                        answer(conn, self.closing)
                    except OSError:  # the client hung up, as it should
                        pass

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closing.set()
        self.thread.join(5)
        self.sock.close()

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def drip(head: bytes, interval: float = 0.2):
    """A RawServer answer: `head`, then a byte every `interval` s until the test ends (each gap well
    under a read timeout, the whole without end)."""
    def answer(conn, closing):
        conn.sendall(head)
        while not closing.is_set():
            conn.sendall(b"x")
            time.sleep(interval)
    return answer
