"""harvest_hub_dataset through its CLI on local ELI5-format files (datasets' json builder, offline)."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import REPO, run_stage


def eli5_row(qid, title, answers=("An answer.",)):
    return {"q_id": qid, "title": title, "selftext": "", "subreddit": "explainlikeimfive",
            "answers": {"a_id": [f"{qid}a{i}" for i in range(len(answers))], "text": list(answers), "score": [1] * len(answers)}}


def harvest(tmp_path, rows, extra_params=None, check=True):
    data = tmp_path / "eli5.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = {"path": "json", "cache_dir": str(tmp_path / "hf"), **(extra_params or {})}
    outs = [tmp_path / "out" / f"queries.{s:05d}.parquet" for s in range(2)]
    args = ["--input", f"data_files={data}", "--params", json.dumps(params)]
    for out in outs:
        args += ["--output", f"queries={out}"]
    return run_stage("harvest_hub_dataset", *args, check=check), outs


def test_maps_fields_shards_and_rejects(tmp_path):
    rows = [eli5_row("a1", "Why is the sea salty?", ("Minerals.", "Evaporation.")), eli5_row("b2", "  "),
            eli5_row("a1", "Duplicate id?"), eli5_row("c3", "How do magnets work?")]
    _, outs = harvest(tmp_path, rows)
    got = sorted((r for out in outs for r in pq.read_table(out).to_pylist()), key=lambda r: r["id"])
    assert [r["id"] for r in got] == ["eli5:a1", "eli5:c3"]
    assert got[0] == {"id": "eli5:a1", "question": "Why is the sea salty?", "body": "", "subreddit": "explainlikeimfive",
                      "answers": ["Minerals.", "Evaporation."], "source": "json:train"}
    report = json.loads(outs[0].with_name(outs[0].name + ".report.json").read_text())
    assert report["rows_in"] == 4 and report["rejected_by_reason"] == {"duplicate_id": 1, "empty_question": 1}
    assert report["rows_in"] == sum(report["rows_out"].values()) + report["rejected"]


def test_rows_without_an_id_are_rejected_not_merged(tmp_path):
    rows = [eli5_row(None, "Why is ice slippery?"), eli5_row("", "Why do cats purr?"), eli5_row(None, "Why is the sky blue?"),
            eli5_row("d4", "How do bees fly?")]
    _, outs = harvest(tmp_path, rows)
    assert [r["id"] for out in outs for r in pq.read_table(out).to_pylist()] == ["eli5:d4"]
    rejects = pq.read_table(outs[0].with_name(outs[0].name + ".rejects.parquet")).to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("eli5:#0", "missing_id"), ("eli5:#1", "missing_id"), ("eli5:#2", "missing_id")]
    report = json.loads(outs[0].with_name(outs[0].name + ".report.json").read_text())
    assert report["rows_in"] == 4 == sum(report["rows_out"].values()) + report["rejected"]


def test_limit_reads_only_the_first_rows(tmp_path):
    _, outs = harvest(tmp_path, [eli5_row(f"q{i}", f"Question {i}?") for i in range(5)], {"limit": 2})
    assert sum(pq.read_table(o).num_rows for o in outs) == 2


def test_field_naming_an_absent_column_fails_clearly(tmp_path):
    result, outs = harvest(tmp_path, [eli5_row("a", "Why?")], {"fields": {"id": "q_id", "question": "headline"}}, check=False)
    assert result.returncode != 0 and "fields {'question': 'headline'} name columns the dataset lacks" in result.stderr
    assert not any(o.exists() for o in outs)


def test_demo_sample_harvests_whole(tmp_path):
    out = tmp_path / "q.parquet"
    run_stage("harvest_hub_dataset", "--input", f"data_files={REPO / 'data/samples/eli5.jsonl'}", "--output", f"queries={out}",
              "--params", json.dumps({"path": "json", "cache_dir": str(tmp_path / "hf")}))
    table = pq.read_table(out)
    assert table.num_rows == len(set(table.column("id").to_pylist())) == 20


def test_a_dataset_that_cannot_be_reached_is_one_line(tmp_path, monkeypatch):
    """A mistyped Hub id, or no network (here: offline mode): one line naming the dataset."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run_stage("harvest_hub_dataset", "--output", f"queries={tmp_path / 'queries.parquet'}",
                       "--params", json.dumps({"path": "no-such-org/no-such-eli5"}), check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert last.startswith("harvest_hub_dataset: error: cannot load dataset 'no-such-org/no-such-eli5' (split 'train', files None): Couldn't reach"), last


def harvest_csv(tmp_path, data: bytes):
    csv_file = tmp_path / "eli5.csv"
    csv_file.write_bytes(data)
    out = tmp_path / "queries.parquet"
    params = {"path": "csv", "cache_dir": str(tmp_path / "hf"), "fields": {"id": "q_id", "question": "title"}}
    result = run_stage("harvest_hub_dataset", "--input", f"data_files={csv_file}", "--output", f"queries={out}",
                       "--params", json.dumps(params), check=False)
    return result, out, csv_file


def test_a_csv_the_builder_cannot_parse_is_one_line_naming_it(tmp_path):
    for data, why in [(b"q_id,title\na1,Why?\na2,Why,extra,cells\n", "Expected 2 fields in line 3, saw 4"),
                      (b'q_id,title\na1,"Why\n', "EOF inside string"), (b"", "No columns to parse from file")]:
        result, out, csv_file = harvest_csv(tmp_path, data)
        last = result.stderr.strip().splitlines()[-1]
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert last.startswith(f"harvest_hub_dataset: error: cannot load dataset 'csv' (split 'train', files ['{csv_file}']): ")
        assert why in last, last


def test_csv_columns_are_read_as_text(tmp_path):
    """One empty id cell does not make the ids floats; `007` keeps its zeros; `NA` is a title, not a null."""
    result, out, _ = harvest_csv(tmp_path, b"q_id,title\n007,Why?\n,How?\n3,NA\n4,\n")
    assert result.returncode == 0, result.stderr[-2000:]
    assert [(r["id"], r["question"]) for r in pq.read_table(out).to_pylist()] == [("eli5:007", "Why?"), ("eli5:3", "NA")]
    rejects = pq.read_table(out.with_name(out.name + ".rejects.parquet")).to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("eli5:#1", "missing_id"), ("eli5:4", "empty_question")]


def test_ids_lose_surrounding_whitespace_and_unprintable_ids_are_rejected(tmp_path):
    rows = [eli5_row("a1 ", "Why is the sky blue?"), eli5_row("a1", "Why is grass green?"), eli5_row("a\nb", "Why?"),
            eli5_row("c\t3", "How?"), eli5_row(7, "Seven?"), eli5_row("7", "Seven again?")]
    _, outs = harvest(tmp_path, rows)
    got = sorted((r["id"], r["question"]) for out in outs for r in pq.read_table(out).to_pylist())
    assert got == [("eli5:7", "Seven?"), ("eli5:a1", "Why is the sky blue?")]
    rejects = pq.read_table(outs[0].with_name(outs[0].name + ".rejects.parquet")).to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("eli5:a1", "duplicate_id"), ("eli5:#2", "bad_id"), ("eli5:#3", "bad_id"),
                                                         ("eli5:7", "duplicate_id")]
    assert "'a\\nb'" in rejects[1]["detail"]
