"""The harness the tests' stand-in HTTP servers share (model servers, the Reddit API, a judge): a
request handler that logs nothing and answers with a length, and a server that runs a handler class
on 127.0.0.1, on a free port, in a thread of its own until it is closed.

    class Handler(QuietHandler):
        def do_POST(self):
            self.answer(200, json.dumps({...}).encode())

    with LocalServer(Handler) as server:
        requests.post(server.url + "/v1/chat/completions", ...)

tests/faulty_server.py is apart: it answers with resets, truncations and drips, below this level."""
from __future__ import annotations

import sys
import threading
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
