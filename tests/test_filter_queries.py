"""filter_queries through its CLI with the embedded model: both judgements, apply on/off, invalid
answers rejected with their raw text, the count invariant, and the cache across processes."""
from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from conftest import REPO, run_stage
from stages.core.tables import write_table

QUESTIONS = ["How do noise cancelling headphones work?", "lol", "Why do onions make you cry?"]


@pytest.fixture
def queries(tmp_path):
    path = tmp_path / "queries.parquet"
    rows = [{"id": f"eli5:{i}", "question": q, "body": "", "subreddit": "explainlikeimfive", "answers": ["An answer."], "source": "json:train"}
            for i, q in enumerate(QUESTIONS)]
    write_table(path, rows, "m2rag_queries")
    return path


def filter_(tmp_path, queries, apply, llm=None):
    out = tmp_path / f"filtered_{apply}.parquet"
    llm = {"cache": {"path": str(tmp_path / "cache.sqlite")}, **(llm or {})}
    run_stage("filter_queries", "--input", f"queries={queries}", "--output", f"filtered_queries={out}",
              "--params", json.dumps({"apply": apply, "llm": llm}))
    report = json.loads(out.with_name(out.name + ".report.json").read_text())
    rejects = pq.read_table(out.with_name(out.name + ".rejects.parquet")).to_pylist()
    return pq.read_table(out).to_pylist(), rejects, report


def test_records_both_judgements_for_every_query_and_caches(tmp_path, queries):
    rows, rejects, report = filter_(tmp_path, queries, apply=False)
    assert [r["id"] for r in rows] == ["eli5:0", "eli5:1", "eli5:2"] and rejects == []
    for row in rows:
        assert row["clear"] in (0, 1) and row["needs_images"] in (0, 1)
        assert 0 < len(row["clear_analysis"]) <= 300 and 0 < len(row["images_analysis"]) <= 300
    assert report["stats"]["llm_calls[m2rag_query_clear]"] == 3 and report["stats"]["llm_calls[m2rag_query_images]"] == 3
    _, _, again = filter_(tmp_path, queries, apply=False)  # a second process reads the shared cache
    assert again["stats"].get("llm_calls", 0) == 0 and again["stats"]["llm_cache_hits"] == 6


def test_apply_drops_queries_judged_zero_with_their_analysis(tmp_path, queries):
    rows, rejects, report = filter_(tmp_path, queries, apply=True)
    # greedy decoding is deterministic: the embedded model judges all three unclear (figure 5)
    assert rows == [] and [(r["id"], r["reason"]) for r in rejects] == [("eli5:0", "not_clear"), ("eli5:1", "not_clear"), ("eli5:2", "not_clear")]
    assert all(r["detail"] for r in rejects) and report["rows_in"] == 3
    assert report["stats"].get("llm_calls[m2rag_query_images]", 0) == 0  # step 2 (figure 6) only sees what step 1 kept


def test_apply_keeps_queries_judged_one_by_both_steps(tmp_path, queries):
    """The keep path, with the model's answers constrained to label 1 by the answer schema."""
    prompts = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    schema = json.loads((REPO / "schemas/answers/m2rag_query_filter.json").read_text())
    schema["properties"]["label"]["enum"] = [1]
    (tmp_path / "label_one.json").write_text(json.dumps(schema))
    for name in ("m2rag_query_clear.md", "m2rag_query_images.md"):
        prompt = prompts / name
        prompt.write_text(prompt.read_text().replace("schema: m2rag_query_filter.json", f"schema: {tmp_path / 'label_one.json'}"))
    rows, rejects, report = filter_(tmp_path, queries, apply=True, llm={"prompts_dir": str(prompts)})
    assert rejects == [] and [r["id"] for r in rows] == ["eli5:0", "eli5:1", "eli5:2"] and report["rows_in"] == 3
    for row, question in zip(rows, QUESTIONS):
        assert row["question"] == question and row["clear"] == 1 and row["needs_images"] == 1
        assert row["clear_analysis"] and row["images_analysis"]
    assert report["stats"]["llm_calls[m2rag_query_images]"] == 3


def test_invalid_answers_become_rejects_with_raw_text(tmp_path, queries):
    prompts = tmp_path / "prompts"
    shutil.copytree(REPO / "prompts", prompts)
    clear = prompts / "m2rag_query_clear.md"
    clear.write_text(clear.read_text().replace("max_tokens: 160", "max_tokens: 3"))  # cut off mid-JSON
    rows, rejects, report = filter_(tmp_path, queries, apply=False, llm={"prompts_dir": str(prompts), "max_attempts": 2})
    assert rows == [] and len(rejects) == 3
    for reject in rejects:
        assert reject["reason"] == "invalid_answer"
        assert reject["detail"].startswith("m2rag_query_clear: non_json") and "raw: {" in reject["detail"]
    assert report["stats"]["llm_invalid"] == 6 and report["stats"]["llm_failed"] == 3
