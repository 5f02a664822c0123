"""extract_atomic_facts (MAVIS Tables 9-10): sentences, subclaims, relevance and provenance through
a rule-answering OpenAI-compatible server on 127.0.0.1, and a real run with the embedded model."""
from __future__ import annotations

import base64
import io
import json

import pyarrow.parquet as pq
from PIL import Image
from pytest_httpserver import HTTPServer

from conftest import run_stage
from mavis_fixtures import answer_by_rule, instance, write_instances
from stages.core.images import ImageStore
from stages.core.tables import write_table
from stages.mavis.extract_atomic_facts import sentences


def _run(tmp_path, instances, llm):
    path = write_instances(tmp_path / "instances.parquet", instances)
    out = tmp_path / "facts.parquet"
    run_stage("extract_atomic_facts", f"--input=instances={path}", f"--output=facts={out}", "--params", json.dumps({"llm": llm}))
    return (pq.read_table(out).to_pylist(), pq.read_table(f"{out}.rejects.parquet").to_pylist(),
            json.loads((tmp_path / "facts.parquet.report.json").read_text()))


def test_sentences_offline():
    assert sentences("The sky is red. It is dusk! Why? ") == ["The sky is red.", "It is dusk!", "Why?"]
    assert sentences("  ") == []


def test_keep_and_reject_paths_through_an_openai_compatible_server(tmp_path, httpserver: HTTPServer):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(answer_by_rule)
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 2,
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    instances = [
        instance("p1", "a", "Smoke scatters blue light and the sun is low. I took the photo at dusk. My cat loves sunsets."),
        instance("p1", "b", "This is garbage text. Red light travels further through air and red light travels further through air."),
        instance("p2", "c", ""),
    ]
    facts, rejects, report = _run(tmp_path, instances, llm)
    assert [(f["fact_id"], f["text"], f["mode"]) for f in facts] == [
        ("reddit:p1/a#0.0", "Smoke scatters blue light.", "title"),
        ("reddit:p1/a#0.1", "the sun is low.", "title"),
        ("reddit:p1/b#1.0", "Red light travels further through air.", "title"),
    ]
    assert all(f["relevance"] == "relevant" and f["verifiable"] == "verifiable" for f in facts)
    assert facts[0]["sentence_text"] == "Smoke scatters blue light and the sun is low." and facts[2]["sentence"] == 1
    assert {r["id"]: r["reason"] for r in rejects} == {
        "reddit:p1/a#1.0": "provided_by_asker",
        "reddit:p1/a#2.0": "irrelevant",
        "reddit:p1/b#0": "invalid_extraction",
        "reddit:p1/b#1.1": "duplicate_fact",
        "reddit:p2/c": "no_sentences",
    }
    assert "these are not subclaims" in next(r["detail"] for r in rejects if r["reason"] == "invalid_extraction")
    assert report["rows_in"] == 3 and report["stats"]["sentences"] == 5 and report["stats"]["facts_extracted"] == 6
    # 5 extraction calls (the bad one retried once) + 5 filter calls (the duplicate is not asked); a rerun is answered by the cache
    assert report["stats"]["llm_calls"] == 11
    _, _, again = _run(tmp_path, instances, llm)
    assert again["stats"].get("llm_calls", 0) == 0 and again["stats"]["llm_cache_hits"] == 11


def test_runs_with_the_embedded_model(tmp_path):
    instances = [instance("p1", "a", "The red colour comes from wildfire smoke. Smoke particles scatter blue light away.")]
    facts, rejects, report = _run(tmp_path, instances, {"cache": {"path": str(tmp_path / "llm.sqlite")}})
    assert report["rows_in"] == 1 and report["stats"]["sentences"] == 2
    # whatever the tiny model says, every sentence and fact is accounted for, and text-only means the title stand-in
    by_reason = report["rejected_by_reason"]
    assert report["stats"].get("facts_extracted", 0) == len(facts) + sum(
        by_reason.get(r, 0) for r in ("duplicate_fact", "irrelevant", "provided_by_asker", "invalid_filter_answer"))
    assert all(f["mode"] == "title" for f in facts)
    assert {r["reason"] for r in rejects} <= {"invalid_extraction", "duplicate_fact", "irrelevant", "provided_by_asker", "invalid_filter_answer"}


def test_a_vision_backend_is_shown_the_post_image(tmp_path, httpserver: HTTPServer):
    """Table 10 requests carry the post's first kept image as a data URL of the stored bytes."""
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 30, 30)).save(buf, "PNG")
    store = ImageStore(tmp_path / "images")
    sha = store.put(buf.getvalue(), "png")
    row = {"id": f"img:{sha}", "ref_id": "imgref:0", "owner_id": "reddit:p1", "query_id": "reddit:p1", "position": 0, "url": "u",
           "final_url": "u", "sha256": sha, "format": "png", "source_format": "png", "width": 32, "height": 24,
           "bytes": len(buf.getvalue()), "clip_score": 0.3, "phash": "0" * 16, "duplicates": 0}
    write_table(tmp_path / "images.parquet", [row], "images_deduped")
    seen = []

    def handler(request):
        content = request.get_json()["messages"][-1]["content"]
        if isinstance(content, list):
            seen.extend(part["image_url"]["url"] for part in content if part["type"] == "image_url")
        return answer_by_rule(request)

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(handler)
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root),
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    path = write_instances(tmp_path / "instances.parquet", [instance("p1", "a", "Smoke scatters blue light and the sun is low.")])
    out = tmp_path / "facts.parquet"
    run_stage("extract_atomic_facts", f"--input=instances={path}", f"--input=images={tmp_path / 'images.parquet'}",
              f"--output=facts={out}", "--params", json.dumps({"llm": llm}))
    facts = pq.read_table(out).to_pylist()
    assert [f["mode"] for f in facts] == ["image", "image"]
    assert seen == [f"data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"] * 2  # the two Table 10 calls
