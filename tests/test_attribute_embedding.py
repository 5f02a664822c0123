"""attribute_embedding through its CLI: the MiniLM baseline (cite-while-you-generate.txt §4.2) on the
packaged all-MiniLM-L6-v2, and CLIP's image placement (once, to the most similar summary sentence)."""
import json

import pyarrow.parquet as pq

from attribution_fixtures import generation, make_items, write_generations
from conftest import run_stage


def test_minilm_baseline(tmp_path):
    gen = generation("b", "text") | {"has_image": False, "source_labels": [0, 1, 2], "pooled": [[0.3, 0.3, 0.4]] * 4}
    items = make_items(tmp_path)
    gens = write_generations(tmp_path / "gens.parquet", [gen])
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_embedding", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"citations={cites}", "--params", json.dumps({"threshold": 0.5, "device": "cpu"}))
    rows = pq.read_table(cites).to_pylist()
    assert "0" in rows[0]["sources"]          # "The knee is swollen and hurts." ~ "Your knee is swollen."
    assert rows[1]["sources"] == ["2"]         # "Ibuprofen was advised." ~ "Take ibuprofen."


def test_clip_places_the_image_once(tmp_path):
    items = make_items(tmp_path)
    gens = write_generations(tmp_path / "gens.parquet", [generation()])
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
