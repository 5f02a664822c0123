"""Throughput of the openai backend with N requests in flight against sequential calls.

    python benchmarks/bench_openai_backend.py [--calls 32] [--concurrency 8] [--latency-ms 200] [--no-llama]

First row, the client's own figure: a local OpenAI-compatible server on 127.0.0.1 that serves
requests concurrently (one thread each) and answers every /v1/chat/completions after a fixed
--latency-ms, as a hosted API or `vllm serve` behaves from the client's side. Timed in the same
run, the cache off, `--calls` distinct prompts:
  bare loop       requests.post one call after another, no client (the floor: calls x latency);
  client c=1      LLMClient(backend=openai, max_in_flight 1);
  client c=N      LLMClient(backend=openai, max_in_flight N);
It prints calls/s, the speed-up of c=N over c=1 (ideal: N) and the client's overhead per call
(client c=1 seconds per call minus the server's latency: rendering, caching, HTTP, JSON).

Second row, for reference: `python -m llama_cpp.server` with the embedded SmolLM2-135M GGUF, bare
and behind a proxy adding --latency-ms. That server decodes one request at a time, so there
concurrency can only overlap HTTP work and the added waits: it measures the server, not the client.
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

from stages.core.llm import LLMClient, LLMRequest, embedded_gguf, server_command  # noqa: E402
from stages.core.prompts import PromptLibrary  # noqa: E402

PROMPT = "---\nkind: text\nmax_tokens: 16\n---\nWrite one short sentence about {{ topic }}.\n"


def start_server(port: int, log) -> subprocess.Popen:
    proc = subprocess.Popen([*server_command(), "--model", str(embedded_gguf()), "--host", "127.0.0.1",
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


def fixed_latency_server(delay: float) -> ThreadingHTTPServer:
    """/v1/chat/completions in the API's response shape after `delay` seconds, requests served
    concurrently; the answer echoes the prompt's last words."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as hosted APIs do
        disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart (delayed ACK)

        def log_message(self, *args):
            pass

        def do_POST(self):
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(delay)
            text = request["messages"][-1]["content"]
            if isinstance(text, list):
                text = " ".join(part.get("text", "") for part in text)
            body = json.dumps({
                "id": "chatcmpl-bench", "object": "chat.completion", "created": int(time.time()), "model": request["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "About " + text[-40:]}}],
                "usage": {"prompt_tokens": len(text.split()), "completion_tokens": 8, "total_tokens": len(text.split()) + 8},
            }).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

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
                "openai": {"base_url": base, "max_in_flight": concurrency, "response_format": "none"}}
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
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--no-llama", action="store_true", help="skip the llama_cpp.server row")
    args = parser.parse_args()
    n, latency = args.calls, args.latency_ms / 1000
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bench.md").write_text(PROMPT)
        prompts = PromptLibrary(tmp)
        fixed = fixed_latency_server(latency)
        try:
            base = f"http://127.0.0.1:{fixed.server_address[1]}/v1"
            client_run(base, ["warm up"], 1, prompts)
            endpoint = f"{args.latency_ms:.0f} ms server"
            rows.append((endpoint, "bare requests loop", bare_loop(base, [f"topic {i} f" for i in range(n)])))
            rows.append((endpoint, "client concurrency 1", client_run(base, [f"topic {i} g" for i in range(n)], 1, prompts)))
            rows.append((endpoint, f"client concurrency {args.concurrency}",
                         client_run(base, [f"topic {i} h" for i in range(n)], args.concurrency, prompts)))
        finally:
            fixed.shutdown()
            fixed.server_close()
        sequential, concurrent = rows[1][2], rows[2][2]
        summary = {"speedup": sequential / concurrent, "overhead_ms": (sequential / n - latency) * 1000,
                   "bare_overhead_ms": (rows[0][2] / n - latency) * 1000}
        if not args.no_llama:
            rows += llama_rows(args, tmp, prompts)
    print(f"{n} calls per row; client cache off")
    print(f"{'endpoint':<22} {'run':<26} {'seconds':>8} {'calls/s':>8} {'vs c=1':>7}")
    for endpoint, name, seconds in rows:
        same = [r for r in rows if r[0] == endpoint and r[1] == "client concurrency 1"]
        ratio = f"{same[0][2] / seconds:6.2f}x" if same else ""
        print(f"{endpoint:<22} {name:<26} {seconds:>8.2f} {n / seconds:>8.2f} {ratio:>7}")
    print(f"fixed-latency server: concurrency {args.concurrency} is {summary['speedup']:.2f}x sequential (target >= 3x); "
          f"client overhead per call {summary['overhead_ms']:.1f} ms (bare requests loop: {summary['bare_overhead_ms']:.1f} ms)")
    print(json.dumps({"calls_per_s": {f"{name} @ {endpoint}": round(n / seconds, 3) for endpoint, name, seconds in rows},
                      **{k: round(v, 2) for k, v in summary.items()}}))


def llama_rows(args, tmp: str, prompts: PromptLibrary) -> list[tuple[str, str, float]]:
    """The same runs against llama_cpp.server (one decode at a time), bare and behind added latency."""
    n, rows = args.calls, []
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with open(Path(tmp) / "server.log", "w") as log:
        server = start_server(port, log)
        try:
            base = f"http://127.0.0.1:{port}/v1"
            client_run(base, ["warm up"], 1, prompts)
            rows.append(("llama_cpp.server", "bare requests loop", bare_loop(base, [f"topic {i} a" for i in range(n)])))
            rows.append(("llama_cpp.server", "client concurrency 1", client_run(base, [f"topic {i} b" for i in range(n)], 1, prompts)))
            rows.append(("llama_cpp.server", f"client concurrency {args.concurrency}",
                         client_run(base, [f"topic {i} c" for i in range(n)], args.concurrency, prompts)))
            proxy = latency_proxy(f"http://127.0.0.1:{port}", args.latency_ms / 1000)
            slow = f"http://127.0.0.1:{proxy.server_address[1]}/v1"
            endpoint = f"llama +{args.latency_ms:.0f} ms"
            rows.append((endpoint, "client concurrency 1", client_run(slow, [f"topic {i} d" for i in range(n)], 1, prompts)))
            rows.append((endpoint, f"client concurrency {args.concurrency}",
                         client_run(slow, [f"topic {i} e" for i in range(n)], args.concurrency, prompts)))
            proxy.shutdown()
        finally:
            server.terminate()
            server.wait(timeout=10)
    return rows


if __name__ == "__main__":
    main()
