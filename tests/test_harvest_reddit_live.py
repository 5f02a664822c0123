"""harvest_reddit_live against a local server on 127.0.0.1 that speaks Reddit's OAuth token
endpoint and listing JSON (praw pointed at it through its oauth_url/reddit_url settings): the same
tables as harvest_pushshift on the same records (deleted posts and comments, a gallery with a failed
item), 429 with Retry-After, a missing credential, record then replay with the server stopped."""
from __future__ import annotations

import base64
import gzip
import json
import time
from urllib.parse import parse_qs, urlsplit

import orjson
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from conftest import run_snakemake, run_stage
from local_http import LocalServer, QuietHandler

DOMAINS = {"Science": ["askscience"], "Art & Design": ["woodworking"]}
START, END = "2023-01-01", "2023-02-01"
T0 = 1672531200  # 2023-01-01T00:00:00Z
ID_ENV, SECRET_ENV = "CF_TEST_REDDIT_ID", "CF_TEST_REDDIT_SECRET"


def _post(pid, sub="askscience", created=T0 + 1000, **kw):
    return {"id": pid, "name": f"t3_{pid}", "subreddit": sub, "title": f"Why {pid}?", "selftext": "", "url": f"https://i.redd.it/{pid}.jpg",
            "is_gallery": False, "author": "alice", "created_utc": float(created), "score": 5, "num_comments": 2, "over_18": False,
            "permalink": f"/r/{sub}/comments/{pid}/", **kw}


def _comment(cid, pid, parent=None, body="an answer", author="bob", created=T0 + 2000):
    return {"id": cid, "name": f"t1_{cid}", "link_id": f"t3_{pid}", "parent_id": parent or f"t3_{pid}", "body": body, "score": 3,
            "author": author, "created_utc": float(created), "subreddit": "askscience", "replies": ""}


GALLERY = _post("g", url="https://www.reddit.com/gallery/g", is_gallery=True,
                gallery_data={"items": [{"media_id": "m2", "id": 1}, {"media_id": "m1", "id": 2}, {"media_id": "m3", "id": 3}, {"media_id": "m4", "id": 4}]},
                media_metadata={"m1": {"status": "valid", "e": "Image", "s": {"u": "https://preview.redd.it/m1.png?width=10&amp;s=1"}},
                                "m2": {"status": "valid", "e": "Image", "s": {"u": "https://preview.redd.it/m2.png?width=10&amp;s=2"}},
                                "m3": {"status": "failed"}})  # m4: no metadata at all


def reddit_data():
    """Posts per subreddit, newest first (the `new` listing's order), and comment trees."""
    posts = {
        "askscience": [
            _post("late", created=T0 + 40 * 86400),  # after the window
            _post("a", created=T0 + 5000),
            _post("del", created=T0 + 4000, author="[deleted]", selftext="[deleted]"),
            GALLERY | {"created_utc": float(T0 + 3500)},
            _post("txt", created=T0 + 3000, url="https://example.com/article"),  # no_image
            _post("nsfw", created=T0 + 2500, over_18=True),
            _post("old", created=T0 - 10),  # before the window: ends the listing
            _post("older", created=T0 - 20),
        ],
        "woodworking": [_post("w", sub="woodworking", created=T0 + 100)],
    }
    comments = {
        "a": {"top": [_comment("c1", "a"), _comment("cdel", "a", body="[deleted]", author="[deleted]")],
              "nested": {"c1": [_comment("r1", "a", parent="t1_c1")]},
              "more": [_comment("c2", "a", body="a longer answer"), _comment("c3", "a", body="[removed]", author="[deleted]")]},
        "del": {"top": [_comment("d1", "del")]},
        "g": {"top": [_comment("g1", "g")]},
        "w": {"top": []},
    }
    return posts, comments


class RedditServer:
    """Reddit's OAuth token endpoint, /r/<sub>/new, /comments/<id> and /api/morechildren."""

    def __init__(self, token="tok-123"):
        self.posts, self.comments = reddit_data()
        self.by_id = {p["id"]: p for sub in self.posts.values() for p in sub}
        self.token = token
        self.throttle: dict[str, int] = {}  # path -> how many 429s to answer first
        self.broken: set[str] = set()  # paths answered 503 forever
        self.expire: set[str] = set()  # paths whose first request finds the token expired (401)
        self.hits: list[tuple[str, str]] = []
        server = self

        class Handler(QuietHandler):
            def _send(self, status, body, headers=()):
                self.answer(status, json.dumps(body).encode(), "application/json; charset=UTF-8", headers)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                server.route(self, "POST", body)

            def do_GET(self):
                server.route(self, "GET", "")

        self.server = LocalServer(Handler)
        self.url = self.server.url

    def stop(self):
        self.server.close()

    def route(self, h, method, body):
        parts = urlsplit(h.path)
        path, query = parts.path.rstrip("/"), parse_qs(parts.query)
        self.hits.append((method, path))
        if path == "/api/v1/access_token":
            expected = "Basic " + base64.b64encode(b"cid:secret").decode()
            if h.headers.get("Authorization") != expected or parse_qs(body).get("grant_type") != ["client_credentials"]:
                return h._send(401, {"error": 401})
            return h._send(200, {"access_token": self.token, "token_type": "bearer", "expires_in": 3600, "scope": "*"})
        if h.headers.get("Authorization") != f"bearer {self.token}":
            return h._send(401, {"message": "Unauthorized", "error": 401})
        if path in self.expire:
            self.expire.discard(path)
            return h._send(401, {"message": "Unauthorized", "error": 401})
        if self.throttle.get(path, 0) > 0:
            self.throttle[path] -= 1
            return h._send(429, {"message": "Too Many Requests", "error": 429}, [("Retry-After", "1")])
        if path in self.broken:
            return h._send(503, {"message": "Service Unavailable", "error": 503})
        limits = [("x-ratelimit-remaining", "99"), ("x-ratelimit-used", "1"), ("x-ratelimit-reset", "1")]
        if path.startswith("/r/") and path.endswith("/new"):
            posts = self.posts[path.split("/")[2]]
            start = 0
            if "after" in query:
                start = next(i for i, p in enumerate(posts) if p["name"] == query["after"][0]) + 1
            page = posts[start:start + int(query["limit"][0])]
            after = page[-1]["name"] if start + len(page) < len(posts) else None
            return h._send(200, {"kind": "Listing", "data": {"after": after, "before": None, "dist": len(page),
                                                             "children": [{"kind": "t3", "data": p} for p in page]}}, limits)
        if path.startswith("/comments/"):
            pid = path.split("/")[2]
            tree = self.comments[pid]
            children = []
            for c in tree["top"]:
                replies = tree.get("nested", {}).get(c["id"])
                data = c | ({"replies": {"kind": "Listing", "data": {"after": None, "children": [{"kind": "t1", "data": r} for r in replies]}}}
                            if replies else {})
                children.append({"kind": "t1", "data": data})
            if tree.get("more"):
                ids = [c["id"] for c in tree["more"]]
                children.append({"kind": "more", "data": {"count": len(ids), "name": f"t1_{ids[0]}", "id": ids[0], "parent_id": f"t3_{pid}",
                                                          "depth": 0, "children": ids}})
            return h._send(200, [{"kind": "Listing", "data": {"after": None, "children": [{"kind": "t3", "data": self.by_id[pid]}]}},
                                 {"kind": "Listing", "data": {"after": None, "children": children}}], limits)
        if path == "/api/morechildren":
            form = parse_qs(body)
            pid = form["link_id"][0].removeprefix("t3_")
            wanted = form["children"][0].split(",")
            things = [{"kind": "t1", "data": c} for c in self.comments[pid].get("more", []) if c["id"] in wanted]
            return h._send(200, {"json": {"errors": [], "data": {"things": things}}}, limits)
        return h._send(404, {"message": "Not Found", "error": 404})


@pytest.fixture
def server():
    srv = RedditServer()
    yield srv
    if srv.server.thread.is_alive():
        srv.stop()


@pytest.fixture
def creds(monkeypatch):
    monkeypatch.setenv(ID_ENV, "cid")
    monkeypatch.setenv(SECRET_ENV, "secret")


def _params(url, **kw):
    return {"domains": DOMAINS, "start": START, "end": END, "page_size": 2, "oauth_url": url, "reddit_url": url, "short_url": url,
            "client_id_env": ID_ENV, "client_secret_env": SECRET_ENV, "mode": "live", "retry_backoff_s": 0.01, **kw}


def _outputs(out, shards, stage="harvest_reddit_live"):
    posts = [r for i in range(shards) for r in pq.read_table(out / f"posts.{i:05d}.parquet").to_pylist()]
    comments = [r for i in range(shards) for r in pq.read_table(out / f"comments.{i:05d}.parquet").to_pylist()]
    rejects = pq.read_table(out / "posts.00000.parquet.rejects.parquet").to_pylist()
    report = json.loads((out / "posts.00000.parquet.report.json").read_text())
    return posts, comments, rejects, report


def _live(out, params, shards=2, check=True):
    args = [f"--output=posts={out}/posts.{i:05d}.parquet" for i in range(shards)]
    args += [f"--output=comments={out}/comments.{i:05d}.parquet" for i in range(shards)]
    result = run_stage("harvest_reddit_live", *args, "--params", json.dumps(params), check=check)
    return result if not check else _outputs(out, shards)


def test_harvest_matches_pushshift_on_the_same_records(tmp_path, server, creds):
    posts, comments, rejects, report = _live(tmp_path / "live", _params(server.url))

    # the same records as pushshift dumps: posts in the window, every comment of the trees
    in_window = [p for sub in server.posts.values() for p in sub if T0 <= p["created_utc"] < T0 + 31 * 86400]
    tree = [c for t in server.comments.values() for c in t["top"] + t.get("more", []) + sum(t.get("nested", {}).values(), [])]
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    for name, records in (("RS_2023-01.zst", in_window), ("RC_2023-01.zst", tree)):
        (dumps / name).write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(orjson.dumps(r) for r in records) + b"\n"))
    ps = tmp_path / "ps"
    run_stage("harvest_pushshift", f"--input=dumps={dumps}/RS_2023-01.zst", f"--input=dumps={dumps}/RC_2023-01.zst",
              *[f"--output=posts={ps}/posts.{i:05d}.parquet" for i in range(2)], *[f"--output=comments={ps}/comments.{i:05d}.parquet" for i in range(2)],
              "--params", json.dumps({"domains": DOMAINS}))
    ps_posts, ps_comments, ps_rejects, _ = _outputs(ps, 2)

    # identical columns and rows, shard by shard
    for table in ("posts", "comments"):
        for i in range(2):
            live_t, ps_t = pq.read_table(tmp_path / "live" / f"{table}.{i:05d}.parquet"), pq.read_table(ps / f"{table}.{i:05d}.parquet")
            assert live_t.schema == ps_t.schema
            key = lambda r: r["id"]  # noqa: E731
            assert sorted(live_t.to_pylist(), key=key) == sorted(ps_t.to_pylist(), key=key)
    assert sorted(p["id"] for p in posts) == ["reddit:a", "reddit:del", "reddit:g", "reddit:w"]
    # "more comments" expanded; the nested reply is not a top-level comment; deleted and removed kept as the dump has them
    assert sorted(c["id"] for c in comments) == ["reddit:c1", "reddit:c2", "reddit:c3", "reddit:cdel", "reddit:d1", "reddit:g1"]
    deleted = {p["id"]: p for p in posts}["reddit:del"]
    assert (deleted["author"], deleted["selftext"]) == ("[deleted]", "[deleted]")
    assert {c["id"]: (c["body"], c["author"]) for c in comments}["reddit:cdel"] == ("[deleted]", "[deleted]")

    # post rejects: the pushshift reasons for the same posts
    post_rejects = {r["id"]: r["reason"] for r in rejects if not r["reason"].startswith("gallery_item")}
    assert post_rejects == {"reddit:txt": "no_image", "reddit:nsfw": "nsfw"}
    assert {r["id"]: r["reason"] for r in ps_rejects if r["id"] in post_rejects} == post_rejects
    assert ("POST", "/api/morechildren") in server.hits
    assert ("GET", "/comments/late") not in server.hits and ("GET", "/r/askscience/new") in server.hits
    assert report["stats"]["listed_after_window"] == 1
    assert report["stats"]["incomplete_window"] == ["woodworking"]  # its listing ended inside the window
    assert report["stats"]["kept_posts"] == 4
    # the gallery keeps its valid items in gallery_data order; the failed and the unknown item are recorded rejects
    gallery = {p["id"]: p for p in posts}["reddit:g"]
    assert gallery["is_gallery"] is True
    assert gallery["image_urls"] == ["https://preview.redd.it/m2.png?width=10&s=2", "https://preview.redd.it/m1.png?width=10&s=1"]
    items = {r["id"]: (r["reason"], r["detail"]) for r in rejects if r["reason"].startswith("gallery_item")}
    assert items == {"reddit:g:m3": ("gallery_item_failed", "m3: status 'failed'"), "reddit:g:m4": ("gallery_item_no_metadata", "m4: not in media_metadata")}
    assert report["stats"]["gallery_items_dropped"] == 2
    # 6 posts in the window + 6 top-level comments = 4 posts + 6 comments + 2 post rejects (+ 2 gallery items, not records)
    assert report["rows_in"] == 12 and report["rejected"] == 2 + 2


def test_429_with_retry_after_then_success_and_comments_that_never_come(tmp_path, server, creds):
    server.throttle = {"/r/askscience/new": 1, "/comments/a": 1}
    server.broken = {"/comments/del"}
    started = time.monotonic()
    posts, comments, rejects, report = _live(tmp_path / "out", _params(server.url, subreddits=["askscience"], retry_attempts=3))
    assert time.monotonic() - started >= 2  # two Retry-After: 1 waits honoured
    assert server.hits.count(("GET", "/r/askscience/new")) == 4 + 1  # 4 pages, the first one twice
    assert server.hits.count(("GET", "/comments/a")) == 2 and server.hits.count(("GET", "/comments/del")) == 3
    assert sorted(p["id"] for p in posts) == ["reddit:a", "reddit:g"]
    assert "reddit:c1" in {c["id"] for c in comments}
    unavailable = [r for r in rejects if r["reason"] == "comments_unavailable"]
    assert [r["id"] for r in unavailable] == ["reddit:del"] and "503" in unavailable[0]["detail"]
    assert report["stats"]["retries"] == 1 + 1 + 2


def test_missing_credential_is_one_clear_line(tmp_path, server, monkeypatch):
    monkeypatch.setenv(ID_ENV, "cid")
    monkeypatch.delenv(SECRET_ENV, raising=False)
    result = _live(tmp_path / "out", _params(server.url), check=False)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]  # the runner's one-line error
    assert last.startswith("harvest_reddit_live: error: environment variable CF_TEST_REDDIT_SECRET (param client_secret_env) is not set")
    assert "Traceback" not in result.stderr
    assert not server.hits  # nothing was sent


def test_a_window_end_the_calendar_lacks_is_one_clear_line(tmp_path, server, creds):
    """2023-02-30 matches the param's ISO pattern but is no date: one line naming the param, nothing sent."""
    result = _live(tmp_path / "out", _params(server.url, end="2023-02-30"), check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "harvest_reddit_live: error: param end (2023-02-30) is not a date: day is out of range for month"
    assert not server.hits


def test_record_then_replay_with_the_server_stopped(tmp_path, server, creds, monkeypatch, workflow_copy):
    warc = tmp_path / "reddit.warc.gz"
    server.broken = {"/comments/del"}
    server.expire = {"/comments/a"}  # praw renews the token and asks again: the 401 is not recorded
    recorded = _live(tmp_path / "rec", _params(server.url, mode="record", warc=str(warc), retry_attempts=2))
    assert server.hits.count(("POST", "/api/v1/access_token")) == 2 and server.hits.count(("GET", "/comments/a")) == 2
    assert warc.stat().st_size > 0
    assert b"tok-123" not in gzip.decompress(warc.read_bytes())  # the token exchange is not recorded
    server.stop()
    monkeypatch.delenv(ID_ENV)
    monkeypatch.delenv(SECRET_ENV)  # a replay needs no credentials
    replayed = _live(tmp_path / "rep", _params(server.url, mode="replay", warc=str(warc)))
    for name in ("posts", "comments"):
        for i in range(2):
            assert pq.read_table(tmp_path / "rec" / f"{name}.{i:05d}.parquet").equals(pq.read_table(tmp_path / "rep" / f"{name}.{i:05d}.parquet"))
    assert recorded[2] == replayed[2]  # the same rejects, comments_unavailable of the failed post included
    assert any(r["reason"] == "comments_unavailable" for r in replayed[2])
    assert replayed[3]["stats"]["replayed"] > 0 and "requests" not in replayed[3]["stats"]
    assert (recorded[3]["rows_in"], recorded[3]["rejected"]) == (replayed[3]["rows_in"], replayed[3]["rejected"])

    # the DAG with mavis.source: reddit_live rebuilds the same tables from the WARC, and filter_questions reads them
    overlay = workflow_copy / "config" / "live.yaml"
    # domains are harvest_pushshift's (the demo's Table 11 merged with ours): name the subreddits, in the recorded order
    section = {k: v for k, v in _params(server.url, mode="replay", warc=str(warc), subreddits=["askscience", "woodworking"]).items() if k != "domains"}
    overlay.write_text(yaml.safe_dump({"mavis": {"source": "reddit_live", "harvest_pushshift": {"domains": DOMAINS}, "harvest_reddit_live": section}}))
    run_snakemake(workflow_copy, "data/runs/demo/mavis/filter_questions/questions.00000.parquet", "--configfile", "config/demo.yaml", "config/live.yaml")
    dag_out = workflow_copy / "data/runs/demo/mavis/harvest_reddit_live"
    for name in ("posts", "comments"):
        for i in range(2):
            assert pq.read_table(dag_out / f"{name}.{i:05d}.parquet").equals(pq.read_table(tmp_path / "rec" / f"{name}.{i:05d}.parquet"))
    report = json.loads((workflow_copy / "data/runs/demo/mavis/filter_questions/questions.00000.parquet.report.json").read_text())
    posts_in_shard = pq.read_table(dag_out / "posts.00000.parquet").num_rows
    assert report["rows_in"] == posts_in_shard
