"""filter_visual_dependency (MAVIS Tables 7-8): text-only answerers, a judge, the drop rule apart
from the scores, through a rule-answering OpenAI-compatible server on 127.0.0.1."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
from pytest_httpserver import HTTPServer

from conftest import run_stage
from mavis_fixtures import answer_by_rule, instance, write_instances


def _run(tmp_path, params):
    path = write_instances(tmp_path / "instances.parquet", [
        instance("p1", "a", "The capital shown is Paris. It is on the Seine. It is big.", question="What capital is on this map?"),
        instance("p2", "b", "Wildfire smoke. Scattering. Dusk.", question="Why is the sky in my photo so red?"),
    ])
    out = {t: tmp_path / f"{t}.parquet" for t in ("kept", "responses", "verdicts")}
    run_stage("filter_visual_dependency", f"--input=instances={path}", f"--output=instances={out['kept']}",
              f"--output=responses={out['responses']}", f"--output=verdicts={out['verdicts']}", "--params", json.dumps(params))
    tables = {t: pq.read_table(p).to_pylist() for t, p in out.items()}
    tables["rejects"] = pq.read_table(f"{out['kept']}.rejects.parquet").to_pylist()
    tables["report"] = json.loads((tmp_path / "kept.parquet.report.json").read_text())
    return tables


def test_drop_when_a_text_only_model_is_judged_right(tmp_path, httpserver: HTTPServer):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(answer_by_rule)
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")},
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    answerers = [{"name": "blind-a", "llm": llm}, {"name": "blind-b", "llm": {**llm, "model": "rule-b"}}]
    out = _run(tmp_path, {"answerers": answerers, "judge": llm})
    assert [i["id"] for i in out["kept"]] == ["reddit:p2/b"]
    assert [(r["id"], r["reason"]) for r in out["rejects"]] == [("reddit:p1/a", "answered_without_image")]
    assert "blind-a (P(right) 1.00), blind-b (P(right) 1.00)" in out["rejects"][0]["detail"]
    assert sorted((r["instance_id"], r["model"], r["response"]) for r in out["responses"]) == [
        ("reddit:p1/a", "blind-a", "Paris"), ("reddit:p1/a", "blind-b", "Paris"),
        ("reddit:p2/b", "blind-a", "no idea"), ("reddit:p2/b", "blind-b", "no idea")]
    assert sorted((v["instance_id"], v["model"], v["verdict"], v["mode"]) for v in out["verdicts"]) == [
        ("reddit:p1/a", "blind-a", "right", "title"), ("reddit:p1/a", "blind-b", "right", "title"),
        ("reddit:p2/b", "blind-a", "wrong", "title"), ("reddit:p2/b", "blind-b", "wrong", "title")]
    report = out["report"]
    assert report["rows_in"] == 2 == report["rows_out"]["instances"] + report["rejected"]
    # 2 answerers x 2 instances, then 2 judge calls: both models gave the same response, judged once
    assert report["stats"]["llm_calls"] == 6 and report["stats"]["llm_calls[mavis_judge_visual]"] == 2
    # a looser decision rule (keep unless more than 2 models are right) re-calls no model
    loose = _run(tmp_path, {"answerers": answerers, "judge": llm, "max_right": 2})
    assert [i["id"] for i in loose["kept"]] == ["reddit:p1/a", "reddit:p2/b"] and loose["rejects"] == []
    assert loose["report"]["stats"].get("llm_calls", 0) == 0 and loose["verdicts"] == out["verdicts"]
