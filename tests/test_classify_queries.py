"""classify_queries through its CLI with the embedded model: categories valid by figure 7's rules,
names joined, count invariant; a malformed category list fails clearly."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import yaml

from conftest import REPO, run_stage
from stages.core.tables import write_table

CATEGORIES = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["m2rag"]["categories"]


def filtered(tmp_path, questions):
    path = tmp_path / "filtered.parquet"
    rows = [{"id": f"eli5:{i}", "question": q, "body": "", "subreddit": "", "answers": [], "source": "json:train",
             "clear": 1, "clear_analysis": "clear", "needs_images": 1, "images_analysis": "visual"} for i, q in enumerate(questions)]
    write_table(path, rows, "m2rag_filtered_queries")
    return path


def classify(tmp_path, source, categories, check=True):
    out = tmp_path / "classified.parquet"
    params = {"categories": categories, "llm": {"cache": {"path": str(tmp_path / "cache.sqlite")}}}
    result = run_stage("classify_queries", "--input", f"filtered_queries={source}", "--output", f"classified_queries={out}",
                       "--params", json.dumps(params), check=check)
    return result, out


def test_assigns_valid_categories_with_names(tmp_path):
    _, out = classify(tmp_path, filtered(tmp_path, ["How does the electoral college work?", "How do bees make honey?"]), CATEGORIES)
    rows = pq.read_table(out).to_pylist()
    report = json.loads(out.with_name(out.name + ".report.json").read_text())
    # greedy decoding is deterministic: both questions get valid categories, none is rejected
    assert report["rows_in"] == 2 and report["rejected"] == 0 and [r["id"] for r in rows] == ["eli5:0", "eli5:1"]
    names = {c["id"]: c["name"] for c in CATEGORIES}
    for row in rows:
        cats = row["categories"]
        assert cats and (cats == [11] or all(1 <= c <= 10 for c in cats)) and len(set(cats)) == len(cats)
        assert row["category_names"] == [names[c] for c in cats] and row["category_analysis"]
        assert row["clear_analysis"] == "clear"  # the filter's columns pass through
    assert report["stats"]["llm_calls[m2rag_query_classify]"] >= 2


def test_malformed_category_list_fails_naming_it(tmp_path):
    result, out = classify(tmp_path, filtered(tmp_path, ["Why?"]), [{"id": "one", "name": "Society"}], check=False)
    assert result.returncode != 0 and "param 'categories.0.id' must be int, got str 'one'" in result.stderr
    assert not out.exists()
