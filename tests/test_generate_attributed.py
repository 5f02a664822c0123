"""generate_attributed through its CLI (cite-while-you-generate.txt §3.2-3.3) with a tiny randomly
initialised vision-language model saved as a local folder (tests/tiny_vlm.py): one row per item and
mode, the img_raw rows carrying the image-token block among the source labels, the text rows none
(an item's image is ignored in text mode), a text-only item in an image mode rejected no_image, and
items x modes = rows + rejects."""
import json

import pyarrow.parquet as pq
import pytest

from attribution_fixtures import make_items
from conftest import run_stage
from stages.attribution.attention import IMAGE
from tiny_vlm import PATCHES, build_tiny_vlm


@pytest.fixture(scope="module")
def tiny_vlm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_vlm")
    build_tiny_vlm(folder)
    return folder


def test_rows_per_item_and_mode_with_the_image_block(tmp_path, tiny_vlm):
    items = make_items(tmp_path)  # a: three sentences and an image after the second; b: text only
    out = tmp_path / "generations.parquet"
    params = {"model": str(tiny_vlm), "model_name": "tiny", "modes": ["text", "img_raw"], "max_new_tokens": 6,
              "summary_sentences": 1, "dtype": "float32", "device": "cpu", "threads": 1}
    run_stage("generate_attributed", "--input", f"source_items={items}", "--output", f"generations={out}", "--params", json.dumps(params))
    rows = {r["id"]: r for r in pq.read_table(out).to_pylist()}
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    report = json.loads(open(f"{out}.report.json").read())
    assert [(r["id"], r["reason"]) for r in rejects] == [("b:img_raw", "no_image")]
    assert set(rows) == {"gen:a:text", "gen:a:img_raw", "gen:b:text"}
    assert report["rows_in"] == 2 * 2 == len(rows) + report["rejected"]
    raw, text = rows["gen:a:img_raw"], rows["gen:a:text"]
    assert raw["has_image"] and raw["source_labels"].count(IMAGE) == PATCHES
    assert not text["has_image"] and IMAGE not in text["source_labels"]
    for row in rows.values():
        assert row["model"] == "tiny" and row["units"] == [str(i) for i in range(len(row["source_sentences"]))]
        # every generated token is pooled over exactly the source tokens and assigned to a summary sentence (or none)
        assert len(row["pooled"]) == len(row["token_sentence"]) > 0
        assert all(len(p) == len(row["source_labels"]) for p in row["pooled"])
        assert set(row["token_sentence"]) <= set(range(-1, len(row["summary_sentences"])))
    assert report["stats"]["generated_tokens"] == sum(len(r["token_sentence"]) for r in rows.values())
