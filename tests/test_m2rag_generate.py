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


def test_published_dev_set_is_evaluated(tmp_path):
    """M2RAG's own published benchmark (M2RAG-Bench: data/dev_set/dev_set.jsonl, images extracted to
    data/images/ELI5/dev_set/..., the layout of the seed's download script and export_dev_set.py)
    is a release eval_m2rag can point at: pages in search order with their scored pieces, each valid
    image after its piece with its published caption and score, auxiliary images; an image whose file
    is absent is shown by its caption; a record that is not JSON or lacks a field is a reject."""
    from m2rag_eval_fixtures import png

    data = tmp_path / "data"
    (data / "dev_set").mkdir(parents=True)
    base = "http://0.0.0.0:65535/ELI5/dev_set"

    def image(path: str | None, image_id: int, score, valid=True, split_id=0, caption="a blue sky over a field"):
        if path:
            (data / "images" / path).parent.mkdir(parents=True, exist_ok=True)
            (data / "images" / path).write_bytes(png((20, 80 + image_id, 200)))
        return {"split_id": split_id, "image_id": image_id, "image_url": f"https://example.org/{image_id}.png",
                "cached_image_url": f"{base}/{path.removeprefix('ELI5/dev_set/')}" if path else f"{base}/query-7/webpage-1/{image_id}.png",
                "valid": valid, "final_score": score, "detailed_image_caption": caption}

    record = {"query_id": 7, "content": "Why is the sky blue?", "level": 1, "aux_images": [
        {k: v for k, v in image("ELI5/dev_set/query-7/9.png", 9, 8).items() if k != "split_id"}], "webpages": [
        {"webpage_id": 0, "url": "https://a.example/sky", "title": "Sky colour", "cleaned_webpage_splits": [
            {"split_id": 0, "text": "Sunlight is scattered by air molecules.", "score": 9},
            {"split_id": 1, "text": "Buy a telescope today.", "score": 1}],
         "images": [image("ELI5/dev_set/query-7/webpage-0/0.png", 0, 9), image(None, 1, 7, split_id=1),
                    image("ELI5/dev_set/query-7/webpage-0/2.png", 2, 9, valid=False, caption=None)]},
        {"webpage_id": 1, "url": "https://b.example/rayleigh", "title": "Rayleigh scattering", "cleaned_webpage_splits": [
            {"split_id": 0, "text": "Blue light scatters more than red light.", "score": 8}], "images": []}]}
    lines = [json.dumps(record), "{not json", json.dumps({"query_id": 8, "webpages": []})]
    dev_set = data / "dev_set" / "dev_set.jsonl"
    dev_set.write_text("\n".join(lines) + "\n")
    responses = tmp_path / "responses.parquet"
    with scripted_server() as (url, seen):
        run_stage("m2rag_generate", "--input", f"release={dev_set}", "--output", f"responses={responses}",
                  "--params", json.dumps({"model": "scripted", "approach": "single_stage", "llm": scripted_llm(tmp_path, url)}))
    [row] = pq.read_table(responses).to_pylist()
    assert row["query_id"] == "m2rag:7" and row["query"] == "Why is the sky blue?"
    assert [(c["page_rank"], c["title"]) for c in row["contexts"]] == [(1, "Sky colour"), (2, "Rayleigh scattering")]
    assert row["contexts"][0]["text"] == "Sunlight is scattered by air molecules."  # the piece scored 1 is below the seed's 3
    # the valid page images (the invalid one is not selected), then the auxiliary image; the one without a file by its caption
    assert [(i["source"], i["url"], i["score"], i["shown"], i["caption_mode"]) for i in row["inputs"]] == [
        ("page", "https://example.org/0.png", 9.0, "image", "published"), ("page", "https://example.org/1.png", 7.0, "caption", "published"),
        ("aux", "https://example.org/9.png", 8.0, "image", "published")]
    assert "a blue sky over a field" in json.dumps(seen[0])
    rejects = pq.read_table(f"{responses}.rejects.parquet").to_pylist()
    assert sorted((r["id"], r["reason"]) for r in rejects) == [("dev_set.jsonl:2", "bad_record"), ("dev_set.jsonl:3", "bad_record")]
    assert "content must be str" in next(r["detail"] for r in rejects if r["id"] == "dev_set.jsonl:3")


def test_a_release_image_is_found_by_its_sha256_only(tmp_path):
    """A release table's sha256 is data: a glob pattern or a path in it names no file."""
    from stages.eval_m2rag.m2rag_eval import image_file

    sha = "ab" * 32
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / f"{sha}.png").write_bytes(b"png")
    (tmp_path / "secret.png").write_bytes(b"not an image of the release")
    assert image_file(tmp_path, sha) == tmp_path / "images" / f"{sha}.png"
    for value in ("*", "ab*", "../secret", "", None, sha.upper()):
        assert image_file(tmp_path, value) is None, value
