"""m2rag_generate through its CLI against a local OpenAI-compatible server on 127.0.0.1 that answers
by rule (tests/m2rag_scripted.py), on the fixture release: images reach a vision model in place as
base64 data URLs of thumbnails, an image without a released file is shown by its caption, a
placeholder to no image is kept as unresolved; the multi-stage approach places and refines."""
from __future__ import annotations

import base64
import io
import json

import pyarrow.parquet as pq
from PIL import Image

from conftest import run_stage
from m2rag_eval_fixtures import make_m2rag_release
from m2rag_scripted import scripted_llm, scripted_server


def test_single_stage_shows_images_in_place(m2rag_responses):
    responses, seen = m2rag_responses
    [body] = seen
    parts = body["messages"][-1]["content"]
    kinds = [p["type"] for p in parts]
    # page 1's image in page 1, the auxiliary image in its own section; page 2's image has no file: its caption stands in
    assert kinds == ["text", "image_url", "text", "image_url", "text"]
    assert "Page 2" not in parts[0]["text"] and "Page 2" in parts[2]["text"] and "panel 2" in parts[2]["text"]
    assert "# Additional images" in parts[2]["text"]
    for part in (parts[1], parts[3]):
        head, data = part["image_url"]["url"].split(",", 1)
        assert head == "data:image/png;base64"
        assert max(Image.open(io.BytesIO(base64.b64decode(data))).size) <= 16  # a thumbnail of the 40 x 40 image
    [row] = pq.read_table(responses).to_pylist()
    assert row["vision"] and [i["shown"] for i in row["inputs"]] == ["image", "caption", "image"]
    assert [o["n"] for o in row["output_images"]] == [1] and row["unresolved"] == ["![nothing](image_9)"]
    assert (row["calls"], row["prompt_tokens"], row["completion_tokens"]) == (1, 100, 10)


def test_multi_stage_places_and_refines(tmp_path):
    release = make_m2rag_release(tmp_path / "rel")
    responses = tmp_path / "responses.parquet"
    with scripted_server() as (url, seen):
        run_stage("m2rag_generate", "--input", f"release={release}", "--output", f"responses={responses}",
                  "--params", json.dumps({"model": "scripted", "approach": "multi_stage", "llm": scripted_llm(tmp_path, url)}))
    [row] = pq.read_table(responses).to_pylist()
    assert row["response"] == ("Blue light is scattered most.\n\nShorter wavelengths scatter more, as the photo below shows.\n\n"
                               "![A photo of a clear blue sky at noon](image_3)\n\nSo the sky looks blue.")
    assert [o["n"] for o in row["output_images"]] == [3] and json.loads(row["placements_json"]) == {"2": [3]}
    assert (row["calls"], row["prompt_tokens"], row["completion_tokens"]) == (3, 300, 30)  # text, interleave, one refinement
    refine_call = seen[-1]["messages"][-1]["content"]
    assert [p["type"] for p in refine_call].count("image_url") == 1  # the chosen image, shown to the vision model
