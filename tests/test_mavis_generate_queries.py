"""mavis_generate_queries through its CLI (mavis.txt §3.1 step 1, App. C.2 Table 15) on the tiny
fixture release, the candidate a local OpenAI-compatible server on 127.0.0.1 answering by rule: the
quoted queries parsed (numbering stripped, duplicates once, the first N kept), an answer with no
query rejected no_queries, a text-only model told the image is not shown, a vision model sent the
question image scaled to max_image_side, an image absent from the release rejected missing_image;
instances in = instances with queries + rejected."""
from __future__ import annotations

import base64
import io
import json

import duckdb
import pyarrow.parquet as pq
from PIL import Image
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_stage
from mavis_eval_fixtures import build_release

TOMATO = "reddit:p1/c1"
BIRD = "reddit:p2/c2"


def _reply(content: str) -> Response:
    body = {"id": "c1", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def _server(httpserver, seen):
    def by_rule(request):
        content = request.get_json()["messages"][-1]["content"]
        seen.append(content)
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        if "tomato" in text:
            return _reply('1. "tomato leaves turning yellow", "nitrogen deficiency tomato", "tomato leaves turning yellow", "third"')
        return _reply("Search queries:")  # nothing to parse
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(by_rule)


def _queries(tmp_path, manifest, httpserver, **params):
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(tmp_path / "store"),
           "max_attempts": 1, "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    out = tmp_path / f"queries-{params['vision']}.parquet"
    run_stage("mavis_generate_queries", f"--input=release={manifest}", f"--output=queries={out}",
              "--params", json.dumps({"model": "cand", "llm": llm, "n_queries": 2, **params}))
    return (pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(),
            json.loads(open(f"{out}.report.json").read()))


def test_queries_parsed_and_rejects(tmp_path, httpserver: HTTPServer):
    folder = tmp_path / "rel" / "v1"
    manifest = build_release(folder)
    seen = []
    _server(httpserver, seen)
    rows, rejects, report = _queries(tmp_path, manifest, httpserver, vision=False)
    assert [(r["instance_id"], r["query_index"], r["query"], r["vision"]) for r in rows] == [
        (TOMATO, 0, "tomato leaves turning yellow", False), (TOMATO, 1, "nitrogen deficiency tomato", False)]
    assert rows[0]["raw"].startswith('1. "tomato') and rows[0]["model"] == "cand"
    assert [(r["id"], r["reason"]) for r in rejects] == [(BIRD, "no_queries")]
    assert report["rows_in"] == 2 == report["stats"]["instances_with_queries"] + report["rejected"]
    assert all(isinstance(c, str) and "an image that you cannot see" in c for c in seen)

    # a vision model: the question image, scaled; the bird's image file is gone from the release
    [(path,)] = duckdb.sql(f"select path from '{folder}/parquet/images.parquet' where url like '%/p2.jpg'").fetchall()
    (folder / path).unlink()
    seen.clear()
    rows, rejects, report = _queries(tmp_path, manifest, httpserver, vision=True, max_image_side=64)
    assert [(r["instance_id"], r["vision"]) for r in rows] == [(TOMATO, True), (TOMATO, True)]
    assert [(r["id"], r["reason"]) for r in rejects] == [(BIRD, "missing_image")]
    assert report["rows_in"] == 2 == report["stats"]["instances_with_queries"] + report["rejected"]
    [content] = seen  # the instance with a missing image asks nothing
    urls = [p["image_url"]["url"] for p in content if p["type"] == "image_url"]
    assert len(urls) == 1 and "cannot see" not in " ".join(p.get("text", "") for p in content)
    assert Image.open(io.BytesIO(base64.b64decode(urls[0].split(",", 1)[1]))).size == (64, 48)  # 640 x 480, longer side 64


def test_test_split_by_default_other_splits_when_asked(tmp_path, httpserver: HTTPServer):
    """§3.2 Step 3: the evaluation reads the human-annotated test split unless asked for more; each
    query row carries its instance's split; a release without splits stops the stage."""
    manifest = build_release(tmp_path / "rel" / "v1", splits=("test", "train"))
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(lambda request: _reply('"a query"'))
    rows, rejects, report = _queries(tmp_path, manifest, httpserver, vision=False)
    assert [(r["instance_id"], r["split"]) for r in rows] == [(TOMATO, "test")] and not rejects
    assert report["rows_in"] == 1 and report["stats"]["not_asked"] == 1 and report["stats"]["instances[test]"] == 1
    rows, _, report = _queries(tmp_path, manifest, httpserver, vision=False, splits=["train", "test"], limit=1)
    assert [(r["instance_id"], r["split"]) for r in rows] == [(BIRD, "train"), (TOMATO, "test")] and report["stats"]["not_asked"] == 0

    bare = tmp_path / "bare" / "v1"
    build_release(bare)
    instances = bare / "parquet" / "instances.parquet"
    pq.write_table(pq.read_table(instances).drop(["split"]), instances)
    failed = run_stage("mavis_generate_queries", f"--input=release={bare.parent / 'release.json'}", f"--output=queries={tmp_path / 'q.parquet'}",
                       "--params", json.dumps({"model": "cand", "llm": {"backend": "openai", "model": "rule"}}), check=False)
    assert failed.returncode != 0 and "no `split` column" in failed.stderr
