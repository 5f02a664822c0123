"""The attribution stages through their CLI on hand-written inputs (no model): the items JSONL and
its rejects, Algorithm 1 on a stored generation, file references and the scores they give, and the
MiniLM baseline on the packaged all-MiniLM-L6-v2."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from stages.core.tables import table_schema

LINES = [
    {"id": "a", "source": "Doctor: Your knee is swollen. Patient: It hurts when I walk. <image> Doctor: Take ibuprofen.",
     "image": "eye.png", "reference": {"summary": "The swollen knee hurts when walking.",
                                       "citations": [{"sentence": "The knee is swollen and hurts.", "sources": [0, 1]},
                                                     {"sentence": "Ibuprofen was advised.", "sources": [2, "IMG"]}]}},
    {"id": "b", "source": "Only text here."},
    "not json",
    {"id": "a", "source": "Duplicate id."},
    {"id": "c", "source": "One. <image> Two. <image>"},
    {"id": "d", "source": "Image gone.", "image": "missing.png"},
    {"id": "e", "source": "Bad reference.", "reference": {"citations": [{"sentence": "x", "sources": [3]}]}},
    {"source": "No id."},
    {"id": "f", "source": "   "},
]


@pytest.fixture
def items(tmp_path):
    from PIL import Image

    Image.new("RGB", (8, 8), "red").save(tmp_path / "eye.png")
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in LINES) + "\n")
    out = tmp_path / "items.parquet"
    run_stage("attribution_inputs", "--input", f"jsonl={jsonl}", "--output", f"source_items={out}")
    return out


def test_items_and_their_rejects(items):
    rows = pq.read_table(items).to_pylist()
    assert [r["id"] for r in rows] == ["a", "b"]
    a = rows[0]
    assert a["sentences"] == ["Doctor: Your knee is swollen.", "Patient: It hurts when I walk.", "Doctor: Take ibuprofen."]
    assert a["image_position"] == 2 and a["image"].endswith("eye.png")
    assert a["reference_citations"][1]["sources"] == ["2", "IMG"]
    rejects = {r["reason"] for r in pq.read_table(f"{items}.rejects.parquet").to_pylist()}
    assert rejects == {"bad_json", "duplicate_id", "bad_placeholder", "image_missing", "bad_field", "empty_source"}
    report = json.loads(open(f"{items}.report.json").read())
    assert report["rows_in"] == len(LINES) and report["rejected"] == len(LINES) - 2


def generation(item_id="a", mode="img_raw"):
    # 4 source tokens: 2 image tokens, then sentences 0, 1, 2; 4 generated tokens in 2 summary sentences
    return {
        "id": f"gen:{item_id}:{mode}", "item_id": item_id, "model": "m", "mode": mode, "has_image": True, "caption": None,
        "units": ["0", "1", "2"], "source_sentences": ["Doctor: Your knee is swollen.", "Patient: It hurts when I walk.", "Doctor: Take ibuprofen."],
        "summary": "The knee is swollen and hurts. Ibuprofen was advised.",
        "summary_sentences": ["The knee is swollen and hurts.", "Ibuprofen was advised."],
        "token_sentence": [0, 0, 1, 1],
        "source_labels": [-1, -1, 0, 1, 2],
        "pooled": [[0.0, 0.0, 0.6, 0.3, 0.1], [0.05, 0.05, 0.2, 0.6, 0.1], [0.3, 0.3, 0.0, 0.0, 0.4], [0.2, 0.2, 0.1, 0.0, 0.5]],
        "prompt_tokens": 20, "seconds": 0.1, "peak_layer_weight_bytes": 0,
    }


def test_algorithm_1_file_references_and_scores(tmp_path, items):
    gens = tmp_path / "gens.parquet"
    pq.write_table(pa.Table.from_pylist([generation()], schema=table_schema("attr_generations")), gens)
    cites, refs = tmp_path / "cites.parquet", tmp_path / "refs.parquet"
    run_stage("attribute_attention", "--input", f"generations={gens}", "--output", f"citations={cites}", "--param", "k=1", "--param", "tau=0.5")
    predicted = [r["sources"] for r in pq.read_table(cites).to_pylist()]
    # k=1: tokens vote 0, 1 | 2, 2; τ 0.5 of 2 tokens = 1 vote; image share 0 / 0.1 vs 0.6 / 0.4 -> sentence 1
    assert predicted == [["0", "1"], ["2", "IMG"]]
    run_stage("attribution_references", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"references={refs}")
    ref_rows = pq.read_table(refs).to_pylist()
    assert [(r["sources"], r["origin"]) for r in ref_rows] == [(["0", "1"], "file"), (["2", "IMG"], "file")]
    out = {k: tmp_path / f"{k}.parquet" for k in ("scores", "summary")}
    run_stage("score_attribution", "--input", f"citations={cites}", "--input", f"references={refs}", "--input", f"generations={gens}",
              "--input", f"source_items={items}", "--output", f"scores={out['scores']}", "--output", f"summary={out['summary']}",
              "--output", f"report={tmp_path / 'report.md'}")
    score = pq.read_table(out["scores"]).to_pylist()[0]
    assert (score["text_f1"], score["text_em"], score["image_acc"], score["joint_em"]) == (100.0, 100.0, 100.0, 100.0)
    assert score["silver"] == 0 and 0 < score["rouge1"] < 1
    assert "| m | img_raw | attention | 2 | 0 | 100.00 | 100.00 | 100.00 | 100.00 |" in (tmp_path / "report.md").read_text()


def test_minilm_baseline(tmp_path, items):
    gen = generation("b", "text") | {"has_image": False, "source_labels": [0, 1, 2], "pooled": [[0.3, 0.3, 0.4]] * 4}
    gens = tmp_path / "gens.parquet"
    pq.write_table(pa.Table.from_pylist([gen], schema=table_schema("attr_generations")), gens)
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_embedding", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"citations={cites}", "--params", json.dumps({"threshold": 0.5, "device": "cpu"}))
    rows = pq.read_table(cites).to_pylist()
    assert "0" in rows[0]["sources"]          # "The knee is swollen and hurts." ~ "Your knee is swollen."
    assert rows[1]["sources"] == ["2"]         # "Ibuprofen was advised." ~ "Take ibuprofen."


def test_clip_places_the_image_once(tmp_path, items):
    gens = tmp_path / "gens.parquet"
    pq.write_table(pa.Table.from_pylist([generation()], schema=table_schema("attr_generations")), gens)
    cites = tmp_path / "cites.parquet"
    refused = run_stage("attribute_embedding", "--input", f"generations={gens}", "--input", f"source_items={items}",
                        "--output", f"citations={cites}", "--params", json.dumps({"device": "cpu"}), check=False)
    assert refused.returncode != 0 and "clip_weights" in refused.stderr  # no silent random CLIP outside tests
    run_stage("attribute_embedding", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"citations={cites}", "--params", json.dumps({"device": "cpu", "clip_random": True}))
    rows = pq.read_table(cites).to_pylist()
    assert sum("IMG" in r["sources"] for r in rows) == 1
    assert all(r["image_score"] is not None for r in rows)
    best = max(rows, key=lambda r: r["image_score"])
    assert "IMG" in best["sources"]
