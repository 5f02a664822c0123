"""Throughput of the openai backend with N requests in flight against sequential calls.

    python benchmarks/bench_openai_backend.py [--calls 32] [--concurrency 8] [--latency-ms 150]

Starts `python -m llama_cpp.server` on 127.0.0.1 with the embedded SmolLM2-135M GGUF (a real
OpenAI-compatible server), then times in the same run, the cache off, the same prompt
(`--calls` distinct topics, 16 tokens each):
  baseline        a bare requests.post loop, one call after another, no client;
  client c=1      LLMClient(backend=openai, concurrency 1);
  client c=N      LLMClient(backend=openai, concurrency N);
and the last two again through a local proxy that adds --latency-ms to every request (a hosted
API's round trip). llama_cpp.server decodes one request at a time, so on the bare local server
concurrency can only overlap HTTP and JSON work; against a latency-bound endpoint it overlaps
the waits. Prints calls/s and the ratio to the baseline.
"""
from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.core.llm import LLMClient, LLMRequest, embedded_gguf  # noqa: E402
from stages.core.prompts import PromptLibrary  # noqa: E402

PROMPT = "---\nkind: text\nmax_tokens: 16\n---\nWrite one short sentence about {{ topic }}.\n"


def start_server(port: int, log) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(embedded_gguf()), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "2048", "--n_threads", "2"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(240):
        try:
            if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).ok:
                return proc
        except requests.ConnectionError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("llama_cpp.server did not start")


def latency_proxy(upstream: str, delay: float) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(delay)
            up = requests.post(upstream + self.path, data=body, headers={"Content-Type": "application/json"}, timeout=600)
            self.send_response(up.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(up.content)))
            self.end_headers()
            self.wfile.write(up.content)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def bare_loop(base: str, topics: list[str]) -> float:
    started = time.perf_counter()
    with requests.Session() as session:
        for topic in topics:
            body = {"model": "smollm2", "temperature": 0, "max_tokens": 16,
                    "messages": [{"role": "user", "content": f"Write one short sentence about {topic}."}]}
            session.post(f"{base}/chat/completions", json=body, timeout=600).raise_for_status()
    return time.perf_counter() - started


def client_run(base: str, topics: list[str], concurrency: int, prompts: PromptLibrary) -> float:
    settings = {"backend": "openai", "model": "smollm2", "cache": {"mode": "off"},
                "openai": {"base_url": base, "concurrency": concurrency, "response_format": "none"}}
    with LLMClient.from_params(settings) as client:
        client.prompts = prompts
        started = time.perf_counter()
        answers = client.run([LLMRequest(t, "bench", {"topic": t}) for t in topics])
        elapsed = time.perf_counter() - started
    bad = [a.error for a in answers if not a.ok]
    if bad:
        raise SystemExit(f"{len(bad)} answers not ok: {bad[:3]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=150.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, open(Path(tmp) / "server.log", "w") as log:
        (Path(tmp) / "bench.md").write_text(PROMPT)
        prompts = PromptLibrary(tmp)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = start_server(port, log)
        try:
            base = f"http://127.0.0.1:{port}/v1"
            client_run(base, ["warm up"], 1, prompts)
            rows = []
            baseline = bare_loop(base, [f"topic {i} a" for i in range(args.calls)])
            rows.append(("local server", "baseline: bare requests loop", baseline))
            rows.append(("local server", "client concurrency 1", client_run(base, [f"topic {i} b" for i in range(args.calls)], 1, prompts)))
            rows.append(("local server", f"client concurrency {args.concurrency}",
                         client_run(base, [f"topic {i} c" for i in range(args.calls)], args.concurrency, prompts)))
            proxy = latency_proxy(f"http://127.0.0.1:{port}", args.latency_ms / 1000)
            slow = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
            rows.append((f"+{args.latency_ms:.0f} ms latency", "client concurrency 1", client_run(slow, [f"topic {i} d" for i in range(args.calls)], 1, prompts)))
            rows.append((f"+{args.latency_ms:.0f} ms latency", f"client concurrency {args.concurrency}",
                         client_run(slow, [f"topic {i} e" for i in range(args.calls)], args.concurrency, prompts)))
            proxy.shutdown()
        finally:
            server.terminate()
            server.wait(timeout=10)
    print(f"{args.calls} calls per row, 16 completion tokens each, SmolLM2-135M on llama_cpp.server")
    print(f"{'endpoint':<20} {'run':<32} {'seconds':>8} {'calls/s':>8} {'vs baseline':>11}")
    for endpoint, name, seconds in rows:
        print(f"{endpoint:<20} {name:<32} {seconds:>8.2f} {args.calls / seconds:>8.2f} {baseline / seconds:>10.2f}x")
    print(json.dumps({name + " @ " + endpoint: round(args.calls / seconds, 3) for endpoint, name, seconds in rows}))


if __name__ == "__main__":
    main()
