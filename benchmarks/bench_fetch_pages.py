"""fetch_pages throughput against a local HTTP server, with a bare-download baseline.

    python benchmarks/bench_fetch_pages.py [--pages 300] [--workers 8] [--repeat 3]

Serves --pages distinct article pages (about 13 KB of HTML each: navigation, an advert, eight
paragraphs, a list, a table, three images, a footer) from a threaded HTTP server on 127.0.0.1,
then times in the same run, --repeat times each, interleaved, the fastest kept (a stage's first
run also imports trafilatura, a one-off cost a real job spreads over thousands of pages):
  baseline     requests.Session + a thread pool downloading every page into memory, nothing else;
  fetch_pages  the stage end to end (fetch layer with its guard, retries and byte cap; charset
               detection and strict decoding; trafilatura markdown; page store writes by sha256;
               Parquet output), into an empty store: first as it runs by default (pages read in
               one markdown process beside the fetching one), then with markdown_processes 0 (all
               in the fetching process, the design before).
Prints pages/s for both and the ratio (the difference is the cost of reading pages as markdown),
the CPU seconds of each (this process, the server's threads included in both, plus the markdown
process's) and the load average.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import logging
import os
import random
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import requests
from pytest_httpserver import HTTPServer
from werkzeug import Response

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stages.core.tables import TableWriter, table_schema  # noqa: E402
from stages.retrieval.fetch_pages import STAGE  # noqa: E402

WORDS = "light air scattered blue wavelength sunset molecules violet horizon colour eye atmosphere red orange energy".split()


def page(n: int) -> str:
    rng = random.Random(n)
    para = lambda: " ".join(rng.choice(WORDS) for _ in range(rng.randint(150, 260))).capitalize() + "."  # noqa: E731
    body = "".join(f"<p>{para()}</p>" + (f'<img src="/img/{n}-{i}.jpg" alt="figure {i}">' if i % 3 == 0 else "") for i in range(8))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Article {n}</title></head><body>"
            f"<nav><a href='/'>Home</a> <a href='/a'>About</a></nav><div class='ad'><a href='https://ads.example/{n}'>Buy now</a></div>"
            f"<article><h1>Article {n}</h1>{body}<ul><li>{para()[:80]}</li><li>{para()[:80]}</li></ul>"
            f"<table><tr><th>a</th><th>b</th></tr><tr><td>{n}</td><td>{n * 2}</td></tr></table></article>"
            f"<footer>Copyright <a href='/privacy'>Privacy</a></footer></body></html>")


def bare_downloads(urls: list[str], workers: int, expected_bytes: int) -> tuple[float, float, float]:
    """(seconds, CPU seconds, 0) to download every page into memory with a session and a thread pool."""
    with requests.Session() as session, concurrent.futures.ThreadPoolExecutor(workers) as pool:
        started, cpu = time.perf_counter(), time.process_time()
        sizes = list(pool.map(lambda u: len(session.get(u, timeout=10).content), urls))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert sum(sizes) == expected_bytes
    return seconds, cpu, 0.0


def stage_run(urls: list[str], workers: int, processes: int) -> tuple[float, float, float]:
    """(seconds, CPU seconds here, CPU seconds of the markdown process) of fetch_pages over the
    urls into an empty store."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.parquet"
        writer = TableWriter(results, table_schema("retrieval_search_results"), "retrieval_search_results")
        writer.write_many([{"id": f"result:{n}", "query_id": f"q{n // 10}", "query": "q", "kind": "page", "rank": n % 10 + 1, "url": url,
                            "title": "", "snippet": "", "page_url": "", "width": None, "height": None, "provider": "google"}
                           for n, url in enumerate(urls)])
        writer.commit()
        out = Path(tmp) / "pages.parquet"
        fetch = {"allow_networks": ["127.0.0.1/32"], "per_host_concurrency": workers}
        params = {"fetch": fetch, "workers": workers, "store": str(Path(tmp) / "store"), "markdown_processes": processes}
        started, cpu, children = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
        STAGE.main(["--input", f"results={results}", "--output", f"pages={out}", "--params", json.dumps(params)])
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        rows = pq.read_table(out).num_rows
    assert rows == len(urls), f"{rows} of {len(urls)} pages read"
    return seconds, cpu, after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each, interleaved; the fastest is reported")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    pages = [page(n).encode() for n in range(args.pages)]
    # one handler looking the page up by its number: a handler per page is matched in a list, a
    # cost per request that grows with --pages and would slow both sides alike
    server.expect_request(re.compile(r"/article/\d+")).respond_with_handler(
        lambda request: Response(pages[int(request.path.rsplit("/", 1)[1])], content_type="text/html; charset=utf-8"))
    server.start()
    urls = [server.url_for(f"/article/{n}") for n in range(args.pages)]
    print(f"{args.pages} pages, {sum(map(len, pages)) / 1e6:.1f} MB of HTML, {args.workers} workers")
    try:
        best: dict = {}  # what -> (seconds, CPU seconds, child CPU seconds) of its fastest run
        for _ in range(args.repeat):  # interleaved, so each sees the same machine load
            run = {"baseline": bare_downloads(urls, args.workers, sum(map(len, pages)))}
            for processes in (1, 0):  # the default (a markdown process beside the fetching one), then all in one process
                run[processes] = stage_run(urls, args.workers, processes)
            for what, timing in run.items():
                best[what] = min(best.get(what, timing), timing)
        base_s, base_cpu, _ = best["baseline"]
        print(f"baseline     {args.pages / base_s:8.1f} pages/s  (bare downloads into memory; {base_cpu:.2f} CPU s)")
        for processes in (1, 0):
            stage_s, stage_cpu, child_cpu = best[processes]
            where = f"markdown in {processes} process beside; {stage_cpu:.2f} + {child_cpu:.2f} CPU s" if processes else f"all in one process; {stage_cpu:.2f} CPU s"
            print(f"fetch_pages  {args.pages / stage_s:8.1f} pages/s  ({where}; {base_s / stage_s:.2f}x the baseline's rate)")
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
