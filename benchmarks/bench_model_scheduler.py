"""How full the model layer keeps a batching server: MAVIS's visual-dependency step (4 answerers +
1 judge) against today's per-job pools, in one run; then the call cache's write rate.

    python benchmarks/bench_model_scheduler.py [--instances 240] [--jobs 2] [--knee 64] [--speed 6]

The stand-in (127.0.0.1, in this process) simulates a batching engine such as vLLM: up to `--knee`
sequences run at once, each at a fixed latency per output token, so throughput rises with the
requests in flight up to the knee and stays there (requests past it queue). Its figures are the
real-scale server's (2,000 output tokens/s at 64 in flight, 10,000 prefill tokens/s) run `--speed`
times faster: a request holds a sequence slot for prompt_tokens x knee / prefill_rate +
completion_tokens x token_latency. Capacity is the knee's worth of slots over the run's window
(first request in to last answer out); the figure is the share of it that requests used. Answers:
a text of 60-200 tokens for the answerers (max_tokens 200, as the prompt), "no" with
log-probabilities for the judge; tokens are counted as 4/3 per word.

Both runs are `--jobs` shard processes over the same instances, with empty caches:
  per-job pools  today's call pattern in each job: the four answerers one after another, then the
                 judge over all responses, each a whole batch, through a pool of 16 per job (the
                 real recipe's `concurrency`), i.e. jobs x 16 in flight and no cap per server;
                 driven here through LLMClient.run with a job-private slots folder, which is that;
  scheduler      the filter_visual_dependency stage itself (its CLI), every answerer in flight at
                 once and the judge fed as answers arrive, `max_in_flight` = the knee shared by the
                 jobs through one slots folder.
Then the cache: CallCache.put in one process, committed in batches, against a commit per write.
The machine's load average is printed before and after: it is shared, and wall times move with it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

# The real-scale server (issue 31) and MAVIS's step at full size; --speed scales the server's time.
REAL_DECODE_TOKENS_S = 2000.0  # output tokens/s at the knee
REAL_PREFILL_TOKENS_S = 10000.0
INSTANCES = 432_000
ANSWER_PROMPT, ANSWER_COMPLETION = 110, 150  # tokens: Table 7's prompt with a title; answers cut at 200
JUDGE_PROMPT, JUDGE_COMPLETION = 700, 1  # Table 8's prompt, gold answer, response and one image tile; yes/no
POOL = 16  # the real recipe's per-job concurrency before this change


def tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 4 / 3))


class StandIn:
    """The batching engine: `knee` sequence slots; each request holds one for its service time."""

    def __init__(self, knee: int, token_s: float, prefill_tokens_s: float):
        self.knee, self.token_s, self.prefill = knee, token_s, prefill_tokens_s
        self.slots = threading.BoundedSemaphore(knee)
        self.lock = threading.Lock()
        self.reset()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def do_POST(self):
                data = stand_in.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.request_queue_size = 1024
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def reset(self) -> None:
        self.first = self.last = None
        self.busy = 0.0  # slot-seconds served
        self.requests = self.in_flight = self.max_in_flight = 0

    def answer(self, request: dict) -> bytes:
        prompt = " ".join(m["content"] if isinstance(m["content"], str) else "" for m in request["messages"])
        yes_no = bool(request.get("logprobs"))
        if yes_no:
            text, completion = "no", 1
        else:  # each model its own answer, of a deterministic length within max_tokens
            digest = hashlib.sha256(f"{request['model']} {prompt}".encode()).hexdigest()
            completion = min(request.get("max_tokens", 200), 60 + int(digest[:6], 16) % 141)
            text = " ".join([request["model"], digest[:8]] + ["word"] * max(1, completion * 3 // 4 - 2))
        prompt_tokens = tokens(prompt)
        service = prompt_tokens * self.knee / self.prefill + completion * self.token_s
        with self.lock:
            now = time.monotonic()
            self.first = now if self.first is None else self.first
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        with self.slots:  # past the knee a request waits for a sequence slot
            time.sleep(service)
        with self.lock:
            self.in_flight -= 1
            self.busy += service
            self.last = time.monotonic()
        choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}
        if yes_no:
            choice["logprobs"] = {"content": [{"token": "no", "logprob": -0.05,
                                               "top_logprobs": [{"token": "no", "logprob": -0.05}, {"token": "yes", "logprob": -3.0}]}]}
        return json.dumps({"id": "c", "object": "chat.completion", "model": request["model"], "choices": [choice],
                           "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion}}).encode()

    def window(self) -> tuple[float, float]:
        """(seconds from the first request in to the last answer out, share of the knee's capacity used)."""
        span = self.last - self.first
        return span, self.busy / (self.knee * span)


def write_shards(folder: Path, n: int, jobs: int) -> list[Path]:
    from stages.core.tables import write_table

    words = "the light in this photo comes from a window behind the plant and the leaves look pale at the tips".split()
    rows = [{"id": f"reddit:p{i:05d}/c", "post_id": f"reddit:p{i:05d}", "subreddit": "whatisthisplant", "domain": "Nature",
             "question": f"What is wrong with plant number {i} in my picture, the one by the window?", "body": "",
             "image_urls": [], "answer": " ".join(words[(i + k) % len(words)] for k in range(60)), "answer_id": "reddit:c",
             "answer_score": 1, "answer_sentences": 3, "answer_rank": 1, "permalink": "", "created_utc": 1, "score": 1}
            for i in range(n)]
    paths = [folder / f"shard{j}.parquet" for j in range(jobs)]
    for j, path in enumerate(paths):
        write_table(path, rows[j::jobs], "reddit_instances")
    return paths


def roles(url: str, cache: Path, max_in_flight: int, slots: Path) -> dict:
    """The stage's answerers and judge, all on the stand-in, sharing one cache and one slots folder."""
    def llm(model: str) -> dict:
        return {"backend": "openai", "model": model, "cache": {"path": str(cache)}, "max_attempts": 1,
                "openai": {"base_url": url, "max_in_flight": max_in_flight, "slots_dir": str(slots), "timeout_s": 600}}

    return {"answerers": [{"name": f"a{k}", "llm": llm(f"answerer-{k}")} for k in range(4)], "judge": llm("judge")}


def per_job_pool_job(shard: str, params: dict) -> None:
    """Today's filter_visual_dependency call pattern (before issue 31), run as one shard job."""
    import pyarrow.parquet as pq

    from stages.core.llm import LLMClient, LLMRequest

    instances = pq.read_table(shard).to_pylist()
    responses = {}
    for answerer in params["answerers"]:
        with LLMClient.from_params(answerer["llm"]) as client:
            answers = client.run([LLMRequest(inst["id"], "mavis_answer_without_image", {"question": inst["question"]})
                                  for inst in instances])
        for inst, answer in zip(instances, answers):
            responses[inst["id"], answerer["name"]] = answer
    names = [a["name"] for a in params["answerers"]]
    to_judge = [(inst, name) for inst in instances for name in names if responses[inst["id"], name].ok]
    with LLMClient.from_params(params["judge"]) as judge:
        verdicts = judge.run([LLMRequest(f"{inst['id']}|{name}", "mavis_judge_visual",
                                         {"question": inst["question"], "gold_answer": inst["answer"],
                                          "response": responses[inst["id"], name].value, "image_text": inst["question"]})
                              for inst, name in to_judge])
    if not all(a.ok for a in responses.values()) or not all(v.ok for v in verdicts):
        raise SystemExit("per-job pools: some answers were not ok")


def run_jobs(commands: list[list[str]]) -> None:
    procs = [subprocess.Popen(c, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for c in commands]
    errors = [p.communicate()[1] for p in procs]
    for proc, err in zip(procs, errors):
        if proc.returncode:
            raise SystemExit(f"a job failed ({proc.returncode}):\n{err[-3000:]}")


def bench_cache(folder: Path, n: int) -> tuple[float, float]:
    """(writes/s batched, writes/s with a commit per write) of CallCache.put in one process."""
    from stages.core.llm import CallCache, Result

    result = Result("A short answer of the usual size, about as long as a judged response. " * 4, None, 120, 150,
                    finish_reason="stop")
    rates = []
    for name, count, each in (("batched", n, False), ("each", max(200, n // 40), True)):
        cache = CallCache(folder / f"{name}.sqlite")
        started = time.perf_counter()
        for i in range(count):
            cache.put(hashlib.sha256(f"{name}{i}".encode()).hexdigest(), "openai", "m", "mavis_judge_visual", result)
            if each:
                cache.flush()
        cache.close()
        rates.append(count / (time.perf_counter() - started))
    return rates[0], rates[1]


def real_scale(scheduler: float, pools: float) -> list[str]:
    """MAVIS's visual-dependency step at full size on five vLLM-class servers (one per model)."""
    answerer_h = INSTANCES * (ANSWER_PROMPT / REAL_PREFILL_TOKENS_S + ANSWER_COMPLETION / REAL_DECODE_TOKENS_S) / 3600
    judge_h = 4 * INSTANCES * (JUDGE_PROMPT / REAL_PREFILL_TOKENS_S + JUDGE_COMPLETION / REAL_DECODE_TOKENS_S) / 3600
    sequential = 4 * answerer_h + judge_h  # per-job pools: the roles one after another, so one server busy at a time
    return [f"real scale ({INSTANCES:,} instances; per server at full capacity: each answerer {answerer_h:.1f} h, the judge {judge_h:.1f} h):",
            f"  per-job pools, 2 jobs x {POOL} in flight (this run's figure {pools:.0%}): {sequential / pools:.0f} h; "
            f"16 shard jobs x {POOL} (256 in flight, servers saturated one at a time): >= {sequential:.0f} h",
            f"  scheduler (this run's figure {scheduler:.0%}, the five servers at once): {max(answerer_h, judge_h) / scheduler:.0f} h, "
            f"the judge's server the bottleneck (the answerers' finish in {answerer_h / scheduler:.0f} h)"]


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--per-job-pool-job":
        return per_job_pool_job(sys.argv[2], json.loads(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--instances", type=int, default=240)
    parser.add_argument("--jobs", type=int, default=2, help="shard jobs running at once (snakemake --cores 2)")
    parser.add_argument("--knee", type=int, default=64, help="sequences the stand-in runs at once")
    parser.add_argument("--max-in-flight", type=int, default=0, help="the scheduler's max_in_flight (default: the knee)")
    parser.add_argument("--speed", type=float, default=6.0, help="the stand-in runs this many times faster than the real-scale server")
    parser.add_argument("--cache-writes", type=int, default=20000)
    args = parser.parse_args()
    max_in_flight = args.max_in_flight or args.knee
    token_s = args.knee / REAL_DECODE_TOKENS_S / args.speed
    stand_in = StandIn(args.knee, token_s, REAL_PREFILL_TOKENS_S * args.speed)
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
    print(f"stand-in: knee {args.knee} sequences, {token_s * 1000:.1f} ms a token ({args.knee / token_s:.0f} output tokens/s at the knee), "
          f"prefill {REAL_PREFILL_TOKENS_S * args.speed:.0f} tokens/s: the real-scale server x{args.speed:g}")
    print(f"workload: {args.instances} instances in {args.jobs} shard jobs; 4 answerers + 1 judge "
          f"({8 * args.instances} calls a run, empty caches)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shards = write_shards(folder, args.instances, args.jobs)
        for run in ("per-job pools", "scheduler"):
            stand_in.reset()
            base = folder / run.replace(" ", "_")
            started = time.monotonic()
            if run == "per-job pools":
                commands = [[sys.executable, __file__, "--per-job-pool-job", str(shard),  # each job a pool and slots of its own
                             json.dumps(roles(stand_in.url, base / f"job{j}" / "llm.sqlite", POOL, base / f"job{j}" / "slots"))]
                            for j, shard in enumerate(shards)]
                label = f"per-job pools ({args.jobs} x {POOL})"
            else:
                params = {**roles(stand_in.url, base / "llm.sqlite", max_in_flight, base / "slots"), "vision": False}
                commands = [[sys.executable, "-m", "stages.mavis.filter_visual_dependency", f"--input=instances={shard}",
                             f"--output=instances={base / f'kept{j}.parquet'}", f"--output=responses={base / f'responses{j}.parquet'}",
                             f"--output=verdicts={base / f'verdicts{j}.parquet'}", "--params", json.dumps(params)]
                            for j, shard in enumerate(shards)]
                label = f"scheduler (max_in_flight {max_in_flight})"
            run_jobs(commands)
            span, share = stand_in.window()
            rows.append((label, stand_in.requests, stand_in.max_in_flight, span, time.monotonic() - started, share))
        writes, each = bench_cache(folder, args.cache_writes)
    print(f"{'run':<30} {'requests':>8} {'most in flight':>14} {'window s':>9} {'wall s':>7} {'of capacity':>11}")
    for label, requests, most, span, wall, share in rows:
        print(f"{label:<30} {requests:>8} {most:>14} {span:>9.1f} {wall:>7.1f} {share:>10.1%}")
    print(f"cache, a commit per write: {each:.0f} writes/s")
    for line in real_scale(rows[1][5], rows[0][5]):
        print(line)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"scheduler: {rows[1][5] * 100:.1f}% of the stand-in's capacity (per-job pools: {rows[0][5] * 100:.1f}%)")
    print(f"cache: {writes:.0f} writes/s")


if __name__ == "__main__":
    main()
