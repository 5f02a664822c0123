"""The model layer's scheduler (issue 31) against a local OpenAI-compatible server on 127.0.0.1:
requests in flight capped per server across processes, a killed process freeing its slots, roles in
flight together with the judge fed as answers arrive, an invalid answer retried alone, rate-limit
headers pausing the whole endpoint, one llamacpp model per process closed with its last client;
and the call cache: batched commits, what a crash loses, one file per host read by every host."""
from __future__ import annotations

import collections
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import REPO, run_stage
from faulty_server import FaultyServer
from mavis_fixtures import instance, write_instances
from stages.core.llm import CallCache, LLMClient, LLMRequest, Result
from stages.core.llm.cache import BATCH, host_file
from stages.core.llm.scheduler import Endpoint, Shared, Slots, parse_duration, rate_limit_wait
from stages.core.prompts import PromptLibrary


class ChatServer:
    """An OpenAI-compatible /v1/chat/completions whose answers `reply(body, n)` decides (n: the
    request's number, from 0): (status, headers, content, seconds to hold the request). Logs
    (model, prompt text, start, end) per request and the most requests it held at once."""

    def __init__(self, reply):
        self.reply = reply
        self.log: list[tuple[str, str, float, float]] = []
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = self.max_in_flight = self.n = 0
        self.lock = threading.Lock()
        self.server = FaultyServer({"/v1/chat/completions": self._route})
        self.url = self.server.url("/v1")

    def _route(self, method, target, headers, body):
        request = json.loads(body)
        content = request["messages"][-1]["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        with self.lock:
            n, self.n = self.n, self.n + 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.bodies.append(request)
            self.headers.append(dict(headers))
        start = time.monotonic()
        status, extra, answer, hold = self.reply(request, n)
        time.sleep(hold)
        with self.lock:
            self.in_flight -= 1
            self.log.append((request["model"], text, start, time.monotonic()))
        if status != 200:
            return status, {"Content-Type": "application/json", **extra}, b'{"error": "injected"}'
        data = answer if isinstance(answer, bytes) else json.dumps(chat(answer, request)).encode()
        return 200, {"Content-Type": "application/json", **extra}, data

    def close(self):
        self.server.close()


def chat(content, request) -> dict:
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    if request.get("logprobs"):
        choice["logprobs"] = {"content": [{"token": content, "logprob": -0.1,
                                           "top_logprobs": [{"token": content, "logprob": -0.1}, {"token": "x", "logprob": -2.4}]}]}
    return {"id": "c", "object": "chat.completion", "model": request["model"], "choices": [choice],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2}}


@pytest.fixture
def prompts(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "say.md").write_text("---\nkind: text\nmax_tokens: 6\n---\nSay one thing about {{ topic }}.\n")
    return folder


def settings(url, tmp_path, **openai) -> dict:
    return {"backend": "openai", "model": "m", "cache": {"path": str(tmp_path / "llm.sqlite")},
            "openai": {"base_url": url, "max_retries": 3, "slots_dir": str(tmp_path / "slots"), **openai}}


def client(url, tmp_path, prompts, stats=None, **openai) -> LLMClient:
    c = LLMClient.from_params(settings(url, tmp_path, **openai), stats=stats if stats is not None else collections.Counter())
    c.prompts = PromptLibrary(prompts)
    return c


# -- requests in flight per server, across processes ----------------------------------------------
WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from stages.core.llm import LLMClient, LLMRequest
    from stages.core.prompts import PromptLibrary
    settings, prompts, go, name, n = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    with LLMClient.from_params(settings) as client:
        client.prompts = PromptLibrary(prompts)
        print("ready", flush=True)
        while not go.exists():
            time.sleep(0.01)
        answers = client.run([LLMRequest(str(i), "say", {"topic": f"{name} {i}"}) for i in range(n)])
    print(sum(a.ok for a in answers), flush=True)
""")


def start_workers(server, tmp_path, prompts, names, n, max_in_flight):
    go = tmp_path / "go"
    go.unlink(missing_ok=True)
    procs = []
    for name in names:
        llm = settings(server.url, tmp_path, max_in_flight=max_in_flight)
        llm["cache"]["mode"] = "off"
        procs.append(subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(llm), str(prompts), str(go), name, str(n)],
                                      cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    go.touch()
    return [proc.communicate(timeout=120)[0].strip() for proc in procs]


def test_max_in_flight_is_shared_by_the_processes_using_a_server(tmp_path, prompts):
    server = ChatServer(lambda body, n: (200, {}, "ok", 0.4))
    try:
        assert start_workers(server, tmp_path, prompts, ["alone"], 9, 3) == ["9"]
        assert server.max_in_flight == 3  # one process alone fills the server's share
        server.max_in_flight = 0
        assert start_workers(server, tmp_path, prompts, ["a", "b"], 9, 3) == ["9", "9"]
        assert server.max_in_flight == 3  # two processes together stay within it (per-job pools would reach 6)
        models = collections.Counter(text.split()[-2] for _, text, _, _ in server.log[9:])
        assert models == {"a": 9, "b": 9}
    finally:
        server.close()


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from stages.core.llm.scheduler import Slots
    slots = Slots(Path(sys.argv[1]), 2)
    slots.acquire(), slots.acquire()
    print("held", flush=True)
    time.sleep(120)
""")


def test_a_killed_process_frees_its_slots(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "slots")], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        slots = Slots(tmp_path / "slots", 2)
        got = []
        waiter = threading.Thread(target=lambda: got.append(slots.acquire()), daemon=True)
        waiter.start()
        waiter.join(0.5)
        assert got == []  # both slots are held by the other process
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        waiter.join(5)
        assert len(got) == 1  # the kernel dropped the dead process's locks
        slots.release(got[0])
        slots.close()
    finally:
        holder.kill()
        holder.wait()


# -- roles together, the judge fed as answers arrive, retries alone --------------------------------
def test_answerers_run_together_and_the_judge_is_fed_as_answers_arrive(tmp_path):
    answers, judge = ChatServer(lambda body, n: (200, {}, "no idea", 0.3)), ChatServer(lambda body, n: (200, {}, "no", 0.05))
    try:
        path = write_instances(tmp_path / "instances.parquet", [instance(f"p{i}", "c", "An answer.", question=f"What is in picture {i}?")
                                                                   for i in range(6)])
        llm = {"backend": "openai", "model": "judge", "cache": {"path": str(tmp_path / "llm.sqlite")},
               "openai": {"base_url": judge.url, "max_retries": 1, "max_in_flight": 4}}
        answerers = [{"name": name, "llm": {**llm, "model": name, "openai": {**llm["openai"], "base_url": answers.url}}}
                     for name in ("blind-a", "blind-b")]
        out = tmp_path / "kept.parquet"
        run_stage("filter_visual_dependency", f"--input=instances={path}", f"--output=instances={out}",
                  f"--output=responses={tmp_path / 'responses.parquet'}", f"--output=verdicts={tmp_path / 'verdicts.parquet'}",
                  "--params", json.dumps({"answerers": answerers, "judge": llm}))
    finally:
        answers.close()
        judge.close()
    spans = {model: [(start, end) for m, _, start, end in answers.log + judge.log if m == model] for model in ("blind-a", "blind-b", "judge")}
    assert len(spans["blind-a"]) == len(spans["blind-b"]) == len(spans["judge"]) == 6  # the same response per question, judged once
    assert any(sa < eb and sb < ea for sa, ea in spans["blind-a"] for sb, eb in spans["blind-b"])  # both answerers at once
    assert min(s for s, _ in spans["judge"]) < max(e for _, e in spans["blind-a"] + spans["blind-b"])  # judged before the answers were all in
    assert answers.max_in_flight == 4 and judge.max_in_flight <= 4


def test_an_invalid_answer_is_retried_at_once_while_others_are_in_flight(tmp_path, prompts):
    def reply(body, n):
        text = body["messages"][-1]["content"]
        if "slow" in text:
            return 200, {}, "slow answer", 1.5
        return 200, {}, ("" if body["seed"] == 0 else "fixed"), 0.0  # attempt 1 (seed 0) is empty, so invalid

    server = ChatServer(reply)
    stats = collections.Counter()
    try:
        with client(server.url, tmp_path, prompts, stats) as c:
            slow, bad = c.run([LLMRequest("s", "say", {"topic": "slow"}), LLMRequest("b", "say", {"topic": "bad"})])
    finally:
        server.close()
    assert slow.ok and bad.ok and bad.value == "fixed" and bad.attempts == 2 and stats["llm_invalid"] == 1
    slow_end = next(end for _, text, _, end in server.log if "slow" in text)
    retry_start = [start for _, text, start, _ in server.log if "bad" in text][1]
    assert retry_start < slow_end  # the retry did not wait for the batch


# -- rate limits --------------------------------------------------------------------------------
def test_a_429_with_retry_after_pauses_every_request_of_the_endpoint(tmp_path, prompts):
    server = ChatServer(lambda body, n: (429, {"Retry-After": "1"}, None, 0) if n == 0 else (200, {}, "ok", 0))
    stats = collections.Counter()
    try:
        with client(server.url, tmp_path, prompts, stats, max_in_flight=1) as c:
            answers = c.run([LLMRequest(str(i), "say", {"topic": f"t{i}"}) for i in range(3)])
    finally:
        server.close()
    assert all(a.ok for a in answers) and stats["llm_http_retries"] == 1
    first = server.log[0]
    assert all(start - first[3] >= 0.9 for _, _, start, _ in server.log[1:])  # nobody else went in the pause


def test_a_spent_request_budget_pauses_until_its_reset(tmp_path, prompts):
    spent = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}
    server = ChatServer(lambda body, n: (200, spent if n == 0 else {}, "ok", 0))
    try:
        with client(server.url, tmp_path, prompts, max_in_flight=1) as c:
            assert all(a.ok for a in c.run([LLMRequest(str(i), "say", {"topic": f"t{i}"}) for i in range(2)]))
    finally:
        server.close()
    assert server.log[1][2] - server.log[0][3] >= 0.9


def test_a_pause_reaches_the_other_processes_of_the_slots(tmp_path):
    one, other = Endpoint("http://x/v1", 2, tmp_path), Endpoint("http://x/v1", 2, tmp_path)  # as two processes see it
    try:
        one.pause(0.6)
        started = time.monotonic()
        with other.slot():
            waited = time.monotonic() - started
    finally:
        one.close()
        other.close()
    assert waited >= 0.5


def test_rate_limit_headers_and_durations():
    assert [parse_duration(v) for v in ("1s", "6m0s", "20ms", "1h2m3.5s", "2", "soon", "")] == [1.0, 360.0, 0.02, 3723.5, 2.0, None, None]
    assert rate_limit_wait(429, {"Retry-After": "3"}) == 3.0
    assert rate_limit_wait(200, {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "9s"}) == 0.0
    assert rate_limit_wait(200, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "250ms"}) == 0.25


# -- engines: one per model per process, closed with the last client ---------------------------------
def test_one_llamacpp_model_per_process_closed_with_its_last_client(tmp_path, prompts):
    params = {"cache": {"mode": "off"}}
    a, b = LLMClient.from_params(params), LLMClient.from_params({**params, "model": "another-label"})
    for c in (a, b):
        c.prompts = PromptLibrary(prompts)
    model = a.backend.model
    assert b.backend.model is model  # one load for both clients
    answers = [f.result() for f in (a.submit(LLMRequest("a", "say", {"topic": "rain"})), b.submit(LLMRequest("b", "say", {"topic": "snow"})))]
    assert all(answer.ok for answer in answers)
    a.close()
    assert model.llm is not None  # b still uses it
    b.close()
    assert model.llm is None and not [k for k in Shared.keys() if k[0] == "llamacpp"]


# -- the call cache ---------------------------------------------------------------------------------
def test_cache_batches_commits_and_serves_the_pending_batch(tmp_path):
    cache = CallCache(tmp_path / "llm.sqlite")
    cache.put("k1", "openai", "m", "say", Result("one"))
    assert cache.get("k1").text == "one"  # from the pending batch
    other = sqlite3.connect(tmp_path / "llm.sqlite")
    assert other.execute("select count(*) from calls").fetchone()[0] == 0  # not committed yet
    cache.close()
    assert other.execute("select raw from calls").fetchall() == [("one",)]
    other.close()


CRASHER = textwrap.dedent("""
    import os, sys
    from stages.core.llm import CallCache, Result
    cache = CallCache(sys.argv[1])
    for i in range(int(sys.argv[2])):
        cache.put(f"k{i}", "openai", "m", "say", Result(f"answer {i}", prompt_tokens=i))
    os.kill(os.getpid(), 9)
""")


def test_a_crash_loses_at_most_the_last_batch_and_never_gives_a_wrong_answer(tmp_path):
    path, n = tmp_path / "llm.sqlite", 2 * BATCH + 100
    subprocess.run([sys.executable, "-c", CRASHER, str(path), str(n)], cwd=REPO)
    con = sqlite3.connect(path)
    assert con.execute("pragma integrity_check").fetchone() == ("ok",)
    rows = con.execute("select key, raw, prompt_tokens from calls").fetchall()
    con.close()
    assert n - BATCH <= len(rows) < n
    assert all(raw == f"answer {key[1:]}" and tokens == int(key[1:]) for key, raw, tokens in rows)


OPENER = textwrap.dedent("""
    import sys, time
    from stages.core.llm import CallCache, Result
    start = float(sys.argv[2])
    time.sleep(max(0.0, start - time.time()))  # every process opens the new file at the same moment
    cache = CallCache(sys.argv[1])
    cache.put(sys.argv[3], "openai", "m", "say", Result("answered"))
    cache.close()
""")


def test_shard_jobs_opening_one_new_cache_at_once_all_open_it(tmp_path):
    """Shard jobs that start together open one new file at once: switching it to WAL can answer
    "database is locked" without waiting on busy_timeout (before the open tried again, 12 of 60
    such starts of six processes failed one). Every opener gets the cache and writes to it."""
    for trial in range(12):
        path = tmp_path / f"t{trial}" / "llm.sqlite"
        start = time.time() + 1.0  # after the interpreters have started
        openers = [subprocess.Popen([sys.executable, "-c", OPENER, str(path), str(start), f"k{i}"], cwd=REPO,
                                    stderr=subprocess.PIPE, text=True) for i in range(6)]
        errors = [o.communicate(timeout=120)[1] for o in openers]
        assert all(o.returncode == 0 for o in openers), "\n".join(errors)
        con = sqlite3.connect(path)
        assert sorted(k for (k,) in con.execute("select key from calls")) == [f"k{i}" for i in range(6)]
        con.close()


HOST_WRITER = textwrap.dedent("""
    import socket, sys
    socket.gethostname = lambda: sys.argv[2]  # this process plays the host named in argv[2]
    from stages.core.llm import CallCache, Result
    cache = CallCache(sys.argv[1], per_host=True)
    cache.put(f"from {sys.argv[2]}", "openai", "m", "say", Result(f"answered on {sys.argv[2]}"))
    cache.flush()
    print("written", flush=True)
    sys.stdin.readline()  # still open while the other host reads
    cache.close()
""")


def test_per_host_cache_skips_a_host_file_still_being_created(tmp_path):
    """Jobs on two hosts start at once: one sees the other's file the moment it exists, before its
    table does (an empty file). It is read by the next job, not an error for this one."""
    path = tmp_path / "shared" / "llm.sqlite"
    path.parent.mkdir()
    (path.parent / "llm.node-z.sqlite").write_bytes(b"")
    reader = CallCache(path, per_host=True)
    try:
        assert reader.get("anything") is None and not reader._others
    finally:
        reader.close()


def test_per_host_cache_two_hosts_write_their_own_files_a_reader_sees_both(tmp_path):
    path = tmp_path / "shared" / "llm.sqlite"
    writers = [subprocess.Popen([sys.executable, "-c", HOST_WRITER, str(path), host], cwd=REPO, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for host in ("node-a", "node-b")]
    try:
        assert [w.stdout.readline().strip() for w in writers] == ["written", "written"]
        assert sorted(p.name for p in path.parent.iterdir()) == ["llm.node-a.sqlite", "llm.node-b.sqlite"]  # no WAL, no shared memory
        reader = CallCache(path, per_host=True)  # a third host, while both writers hold their files open
        assert reader.file == host_file(path) and reader.get("from node-a").text == "answered on node-a"
        assert reader.get("from node-b").text == "answered on node-b" and reader.get("from node-c") is None
        reader.put("mine", "openai", "m", "say", Result("here"))
        reader.close()
        assert {p.name for p in path.parent.iterdir()} == {"llm.node-a.sqlite", "llm.node-b.sqlite", host_file(path).name}
    finally:
        for w in writers:
            w.communicate("\n", timeout=30)
    assert all(w.returncode == 0 for w in writers)
