"""CiteEval-Auto's rules end to end in a copy of the repository: the MCiteBench evaluation's responses
(embedded SmolLM2 as candidate, on a release made from MCiteBench's released records) and a file in
CiteEval's JSON format, rated by the rule-answering judge server (tests/citeeval_judge.py), with
the Eq. 3 refit and human ratings wired in; `evaluate` includes both reports."""
from __future__ import annotations

import csv
import json
import re
import subprocess

import duckdb
import yaml

from citeeval_judge import RuleJudge
from conftest import demo_config
from eval_fixtures import copy_repo_subset, make_release, reference_records, shrink
from stages.citeeval.citeeval import ACTIONS

SAMPLES = [
    {"sample_idx": "f1", "query": "can use hkd in shenzhen?",
     "passages": [{"id": "1", "title": "", "text": "HKD is almost useless in Shenzhen."},
                  {"id": "2", "title": "", "text": "Some merchants near the border take HKD."}],
     "prediction": "HKD is almost useless in Shenzhen [1][2]. Some merchants near the border take it [2]."},
    {"sample_idx": "f2", "query": "munich to rome by train?",
     "passages": [{"id": "1", "title": "", "text": "Take trains to the foot of the Alps, then buses."}],
     "prediction": "No answer is found."},
]


def test_citeeval_rules(tmp_path):
    judge = RuleJudge()
    try:
        work = copy_repo_subset(tmp_path / "repo")
        folder = make_release(tmp_path / "released", [shrink(r) for r in reference_records()], manifest=False)
        (tmp_path / "samples.json").write_text(json.dumps(SAMPLES))
        with (tmp_path / "fit.csv").open("w", newline="") as fh:  # Eq. 3 with keep 1, delete_redundant 0.5, others 0, b 0
            writer = csv.DictWriter(fh, fieldnames=[*ACTIONS, "rating"])
            writer.writeheader()
            for i in range(12):
                counts = dict.fromkeys(ACTIONS, 0) | ({"keep": i % 3 + 1, "delete_redundant": i % 2} if i % 4 else {})
                total = sum(counts.values())
                share = (counts["keep"] + 0.5 * counts["delete_redundant"]) / total if total else 0.0
                writer.writerow({**counts, "rating": 1 + 4 * share})
        (tmp_path / "human.csv").write_text("response_id,sentence_id,rating\nf1,1,3\nf1,2,5\nf2,1,\n")
        config = {
            "run": "t", "mavis": {"enabled": False}, "mcitebench": {"enabled": False}, "m2rag": {"enabled": False}, "attribution": {"enabled": False},
            "eval_mcitebench": {"enabled": True, "release": str(folder), "generate_answers": {"limit": 2, "max_tokens": 24},
                         "judge": {"name": "judge-smol"}, "models": [{"name": "smol-a"}]},
            "citeeval": {"enabled": True, "input": str(tmp_path / "samples.json"), "citeeval_prepare": {"model": "system-x", "limit": 0},
                         "judge": {"name": "rule-judge", "llm": judge.llm(tmp_path)},
                         "citeeval_fit": {"human_ratings": str(tmp_path / "fit.csv")},
                         "citeeval_score": {"human_ratings": str(tmp_path / "human.csv")}},
        }
        (work / "config" / "test.yaml").write_text(yaml.safe_dump(config))
        plan = subprocess.run(["snakemake", "--cores", "2", "evaluate", "--configfile", "config/demo.yaml", "config/test.yaml", "-n"],
                              cwd=work, capture_output=True, text=True, timeout=300)
        assert plan.returncode == 0 and re.search(r"citeeval_report\s+2\b", plan.stdout), plan.stdout[-3000:] + plan.stderr[-2000:]
        targets = ["data/runs/t/eval_mcitebench/citeeval_report/report.md", "data/runs/t/citeeval/citeeval_report/report.md"]
        done = subprocess.run(["snakemake", "--cores", "2", *targets, "--configfile", "config/demo.yaml", "config/test.yaml"],
                              cwd=work, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    finally:
        judge.close()
    runs = work / "data" / "runs" / "t"
    fitted = json.loads((runs / "citeeval" / "citeeval_fit" / "coefficients.json").read_text())
    for key, value in {"keep": 1.0, "delete_redundant": 0.5, "intercept": 0.0}.items():
        assert abs(fitted["coefficients"][key] - value) < 1e-9

    con = duckdb.connect(str(runs / "citeeval" / "citeeval_report" / "citeeval.duckdb"), read_only=True)
    rows = dict(con.execute("select id || '/' || scenario, citeeval_auto from responses where mode = 'strict'").fetchall())
    # f1: sentence 1 cites [1][2]: the judge deletes 2 (redundant), rates 4; sentence 2 cites [2]: N/A, rates 5
    s1 = (0.75 + (1 + 0.5) / 2) / 2
    s2 = (1.0 + 1.0) / 2
    assert abs(rows["f1/full"] - (s1 + s2) / 2) < 1e-9 and abs(rows["f1/cited"] - (s1 + s2) / 2) < 1e-9
    assert rows["f2/full"] is None  # "No answer is found": nothing applicable
    assert con.execute("select status from responses where id = 'f2' and mode = 'strict' and scenario = 'full'").fetchone() == ("not_applicable",)
    assert con.execute("select count(*) from meta where level = 'statement'").fetchone()[0] > 0
    report = (runs / "citeeval" / "citeeval_report" / "report.md").read_text()
    assert "| system-x |" in report and "Reference-compatible" in report and "Meta-evaluation" in report

    con = duckdb.connect(str(runs / "eval_mcitebench" / "citeeval_report" / "citeeval.duckdb"), read_only=True)
    assert [m for m, n in con.execute("select model, count(distinct id) from responses group by all").fetchall() if n >= 1] == ["smol-a"]
    assert con.execute("select count(*) from statements").fetchone()[0] > 0
    assert "| smol-a |" in (runs / "eval_mcitebench" / "citeeval_report" / "report.md").read_text()
    exported = json.loads((runs / "citeeval" / "citeeval_prepare" / "citeeval.file.json").read_text())
    assert [s["sample_idx"] for s in exported] == ["f1", "f2"]



def test_mavis_and_m2rag_evaluations_feed_citeeval(workflow_copy, tmp_path):
    """Every evaluation with cited responses feeds CiteEval-Auto: with a MAVIS and an M2RAG release
    to evaluate (the families themselves off), `evaluate` plans a converter per MAVIS model and per
    M2RAG (model, approach), and one CiteEval report beside each evaluation's report."""
    from m2rag_eval_fixtures import make_m2rag_release
    from mavis_eval_fixtures import build_release

    mavis = workflow_copy / "mavis-release" / "v1"
    build_release(mavis)
    m2rag = make_m2rag_release(tmp_path / "m2rag-release", manifest=False)
    config = demo_config()
    for family in ("mavis", "mcitebench", "m2rag", "eval_mcitebench", "attribution", "retrieval", "images"):
        config[family]["enabled"] = False
    config["eval_mavis"]["release"] = str(mavis)
    config["eval_mavis"]["models"] = [{"name": "mv-a"}, {"name": "mv-b"}]
    config["eval_m2rag"].update(release=str(m2rag), approaches=["single_stage", "separate"])
    (workflow_copy / "config" / "test.yaml").write_text(yaml.safe_dump(config))
    plan = subprocess.run(["snakemake", "--cores", "2", "evaluate", "--configfile", "config/test.yaml", "-n"],
                          cwd=workflow_copy, capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    counts = dict(re.findall(r"^(citeeval_\w+)\s+(\d+)$", plan.stdout, re.M))
    assert counts["citeeval_from_mavis"] == "2" and counts["citeeval_from_m2rag"] == "2"  # 2 models; 1 model x 2 approaches
    assert counts["citeeval_prepare"] == "4" and counts["citeeval_report"] == "2" and "citeeval_from_mcitebench" not in counts
    for path in ("eval_mavis/citeeval_report/report.md", "eval_m2rag/citeeval_report/report.md",
                 "citeeval/citeeval_prepare/prepared_responses.m2rag-00000-separate.parquet", "citeeval/citeeval_prepare/prepared_responses.mavis-00001.parquet"):
        assert f"data/runs/demo/{path}" in plan.stdout
