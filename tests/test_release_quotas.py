"""Release quotas (MCiteBench §3.6, Table 1): the seeded stratified sampler and release_mcitebench's use of it."""
import itertools
import json
from pathlib import Path

import pyarrow.parquet as pq

from stages.core.quotas import check_quotas, sample
from tests.conftest import run_stage
from tests.test_release_mcitebench import build, release

SEED_QUOTAS = {"total": 3000, "seed": 0, "question_type": {"explanation": 2000, "locating": 1000},
               "source_type": {"single": 2538, "multi": 462},
               "evidence_modality": {"text": 1243, "figure": 941, "table": 533, "mixed": 283}}


def pool():
    """Every combination of strata, several times: 2 x 2 x 4 x 5 = 80 questions."""
    combos = itertools.product(("explanation", "locating"), ("single", "multi"), ("text", "figure", "table", "mixed"), range(5))
    return [{"id": f"q{i:03d}", "question_type": t, "source_type": s, "evidence_modality": m} for i, (t, s, m, _) in enumerate(combos)]


def counts(rows, dim):
    out = {}
    for r in rows:
        out[r[dim]] = out.get(r[dim], 0) + 1
    return out


def test_feasible_targets_are_met_exactly():
    quotas = {"total": 30, "seed": 1, "question_type": {"explanation": 20, "locating": 10}, "source_type": {"single": 25, "multi": 5},
              "evidence_modality": {"text": 12, "figure": 9, "table": 6, "mixed": 3}}
    picked, achieved = sample(pool(), quotas)
    assert len(picked) == 30
    assert counts(picked, "question_type") == {"explanation": 20, "locating": 10}
    assert counts(picked, "source_type") == {"single": 25, "multi": 5}
    assert counts(picked, "evidence_modality") == {"text": 12, "figure": 9, "table": 6, "mixed": 3}
    assert all(a["achieved"] == a["target"] for a in achieved)


def test_seeded_and_order_free():
    quotas = {"total": 12, "seed": 7, "question_type": {"explanation": 8, "locating": 4}}
    first = sorted(q["id"] for q in sample(pool(), quotas)[0])
    assert first == sorted(q["id"] for q in sample(list(reversed(pool())), quotas)[0])  # the input order does not matter
    assert first != sorted(q["id"] for q in sample(pool(), {**quotas, "seed": 8})[0])  # the seed does


def test_short_pool_reports_what_it_achieved():
    picked, achieved = sample(pool()[:10], SEED_QUOTAS)  # ten explanation/single questions
    assert len(picked) == 10
    rows = {(a["dimension"], a["value"]): a for a in achieved}
    assert rows[("total", "all")] == {"dimension": "total", "value": "all", "target": 3000, "available": 10, "achieved": 10}
    assert rows[("question_type", "locating")]["achieved"] == 0 and rows[("question_type", "locating")]["target"] == 1000


def test_bad_quotas_are_named():
    assert check_quotas(SEED_QUOTAS) == []
    assert check_quotas({"question_type": {"explanation": -1}, "size": 3}) == [
        "unknown quota key 'size'", "quota question_type.explanation must be a count >= 0, got -1"]


def test_release_samples_to_quotas_and_reports_them(tmp_path):
    store, el, _ = build(tmp_path)
    quotas = {"total": 2, "seed": 0, "question_type": {"explanation": 1, "locating": 1}}
    manifest = tmp_path / "out" / "release.json"
    run_stage("release_mcitebench", "--input", f"questions={tmp_path}/sampled.parquet", "--input", f"evidence={tmp_path}/evidence.parquet",
              "--input", f"distractors={tmp_path}/distractors.parquet", "--input", f"elements={el}", "--output", f"manifest={manifest}",
              "--params", json.dumps({"releases_dir": str(tmp_path / "releases"), "image_store": str(store.root), "quotas": quotas}))
    folder = Path(json.loads(manifest.read_text())["path"])
    records = [json.loads(line) for line in (folder / "mcitebench.jsonl").read_text().splitlines()]
    assert sorted(r["question_type"] for r in records) == ["explanation", "locating"]
    rejects = pq.read_table(f"{manifest}.rejects.parquet").to_pylist()
    assert [r["reason"] for r in rejects] == ["over_quota", "over_quota"]
    card = (folder / "README.md").read_text()
    assert "## Quotas (MCiteBench Table 1 targets: target vs achieved)" in card
    assert "| question_type | explanation | 1 | 2 | 1 |" in card and "| total | all | 2 | 4 | 2 |" in card


def test_no_quotas_no_quota_section(tmp_path):
    store, el, _ = build(tmp_path)
    manifest, _ = release(tmp_path, store, el)
    assert "## Quotas" not in (Path(manifest["path"]) / "README.md").read_text()
