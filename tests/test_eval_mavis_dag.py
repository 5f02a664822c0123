"""The MAVIS evaluation DAG (rules/eval_mavis.smk) on a tiny fixture release: 2 models x 2 methods,
2 instances, Text-RAG, K = 2. The models and the judge are an OpenAI-compatible server on 127.0.0.1
answering by rule (the embedded SmolLM2 takes minutes a call on a loaded machine; the demo config
runs it); the retriever and MAUVE's features are the packaged MiniLM. The report and the DuckDB
file hold every (model, setting, method, scoring) combination, and the catalog shows the tables."""
from __future__ import annotations

import json

import duckdb
import pytest
import yaml
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_snakemake, demo_config
from mavis_eval_fixtures import build_release

pytestmark = pytest.mark.slow

MODELS = ["model-a", "model-b"]
METHODS = ["vanilla", "cot"]


def _reply(content: str) -> Response:
    body = {"id": "c1", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def by_rule(request):
    messages = request.get_json()["messages"]
    content = messages[-1]["content"]
    text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    model = request.get_json()["model"]
    if "Search queries:" in text:
        return _reply('"tomato leaves turning yellow", "second query"')
    if "Let's think step by step" in text:
        return _reply("<thinking>1. The relevant documents are [1].</thinking>\nThe leaves lack nitrogen [1]. Older leaves go first [1][2].")
    if "Answer the question helpfully" in text:
        extra = " It is a common problem." if model == "model-b" else ""
        return _reply(f"The leaves lack nitrogen [1].{extra} Water at the base [2][9].")
    if "Fact:" in text:
        return _reply(json.dumps({"label": "Partially addressed"}))
    statement = text.rsplit("Statement:", 1)[1].split("\n")[0]
    if "Documents:" in text:
        return _reply(json.dumps({"label": "fully support" if "nitrogen" in statement else "not support"}))
    if "common problem" in statement:
        return _reply("no label")  # a failed judge call: missing in strict scoring
    return _reply(json.dumps({"label": "Fully relevant"}))


def _config(workdir, release, url):
    config = demo_config()
    for family in ("mavis", "mcitebench", "m2rag", "evaluate", "citeeval", "retrieval", "images"):
        if family in config:
            config[family]["enabled"] = False
    config["run"] = "mavis-eval"

    def llm(model):
        return {"backend": "openai", "model": model, "max_attempts": 1, "openai": {"base_url": url, "max_retries": 1}}

    config["eval_mavis"] = {
        "enabled": True,
        "release": str(release),
        "mavis_generate_queries": {"splits": ["test"], "n_queries": 1, "limit": 2},  # the demo's [train] would merge in
        "mavis_retrieve": {"settings": ["text"], "top_k": 2},
        "mavis_generate_answers": {"methods": METHODS},
        "mavis_score": {"mauve_featurizer": "sentence-encoder"},  # the default is the seed's gpt2-large folder
        "judge": {"name": "rule-judge", "llm": llm("judge")},
        "models": [{"name": name, "llm": llm(name)} for name in MODELS],
    }
    path = workdir / "eval_mavis.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_eval_mavis_dag_two_models_two_methods(workflow_copy, httpserver: HTTPServer):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(by_rule)
    release = workflow_copy / "fixture-release" / "v1"
    build_release(release)
    config = _config(workflow_copy, release, httpserver.url_for("/v1"))
    run_snakemake(workflow_copy, "evaluate", "--configfile", str(config))
    out = workflow_copy / "data/runs/mavis-eval/eval_mavis/report_mavis"
    report = (out / "report.md").read_text()
    con = duckdb.connect(str(out / "evaluation.duckdb"), read_only=True)
    combos = set(con.execute("select model, setting, method, scoring from summary").fetchall())
    assert combos == {(m, "text", t, s) for m in MODELS for t in METHODS for s in ("strict", "reference")}
    assert con.execute("select count(*) from responses").fetchone()[0] == len(MODELS) * len(METHODS) * 2
    assert con.execute("select count(*) from scores").fetchone()[0] == 2 * len(MODELS) * len(METHODS) * 2
    assert con.execute("select count(distinct retriever) from retrieved").fetchone()[0] == 1
    assert con.execute("select count(*) from responses where answer ilike '%<thinking>%'").fetchone()[0] == 0
    # model-b's extra sentence has a failed relevance call: missing in strict. The reference scoring judges only the
    # statements before a citation ("The leaves lack nitrogen", "Water at the base"), both fully relevant
    assert con.execute("select count(*) from judgements where not ok and score is null").fetchone()[0] == 2
    rel = dict(con.execute("select scoring, value from summary where model = 'model-b' and method = 'vanilla' and metric = 'relevance'").fetchall())
    assert rel["strict"] is None
    assert con.execute("select list(score) from judgements where model = 'model-b' and method = 'vanilla' and scoring = 'reference' "
                       "and kind = 'relevance'").fetchone()[0] == [1.0] * 4  # two statements in each of its two answers
    # the fixture's gold answers are under 500 characters: groundedness.py, run first, rewrote the answers file
    # without them, so every reference mean leaves them out (relevance too: 1.0 above is never averaged)
    for metric in ("recall", "completeness", "relevance"):
        assert con.execute("select value, missing from summary where model = 'model-a' and method = 'vanilla' and scoring = 'reference' "
                           "and metric = ?", [metric]).fetchone() == (None, 2)
    # vanilla, model-a: "nitrogen [1]" fully supported, "Water [2][9]" not (document 9 does not exist):
    # recall (1 + 0) / 2; precision (1 + (0 + 0) / 2) / 2; completeness 0.5 for every fact
    got = dict(con.execute("select metric, value from summary where model = 'model-a' and method = 'vanilla' and scoring = 'strict'").fetchall())
    assert (got["recall"], got["precision"], got["completeness"], got["relevance"]) == (0.5, 0.5, 0.5, 1.0)
    assert got["mauve"] is not None  # 2 answers a side, MiniLM features
    for model in MODELS:
        for method in ("Vanilla", "CoT"):
            assert f"| {model} | + Text-RAG | {method} |" in report
    assert "strict scoring" in report and "reference scoring" in report and "sentence-encoder" in report
    assert (out / "groundedness_by_modality.png").stat().st_size > 0 and (out / "utilisation_by_modality.png").stat().st_size > 0
    again = run_snakemake(workflow_copy, "evaluate", "--configfile", str(config), "--dry-run")
    assert "Nothing to be done" in again.stdout + again.stderr
    # the run catalog shows the evaluation tables once they exist
    run_snakemake(workflow_copy, "catalog", "--configfile", str(config))
    catalog = duckdb.connect(str(workflow_copy / "data/runs/mavis-eval/catalog.duckdb"), read_only=True)
    assert catalog.execute("select count(*) from eval_mavis.summary").fetchone()[0] == con.execute("select count(*) from summary").fetchone()[0]
