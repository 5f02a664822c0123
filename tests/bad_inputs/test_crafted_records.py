"""Crafted records for the stages that read JSON lines themselves: their inputs are files, not
tables, so no table contract stands before them. Each line is a real record with some of its
fields, at any depth, swapped for a value of another type or shape (null, a number, NaN, a list, a
NUL, a path out of the folder, 5,000 characters) or dropped; some lines are not objects at all. A
few hundred such lines go through the stage's real CLI. Nothing may crash: every line is read (rows
in = the lines), each kept or one reject, and a stage that cannot go on says so in one line.

CI draws the same lines every run; CITEFORGE_CONTRACT_SEED=<n> draws others (a deeper hunt by
hand, as for tests/test_stage_contract.py)."""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from attribution_fixtures import LINES as ATTRIBUTION_LINES
from conftest import REPO, run_stage
from eval_fixtures import make_release, reference_records
from m2rag_eval_fixtures import png
from schema_llm import plain_llm_server
from stages.citeeval.citeeval import ACTIONS

SEED = int(os.environ.get("CITEFORGE_CONTRACT_SEED", "20261127"))
ODD = [None, 0, -1, 1.5, 1e308, float("nan"), True, False, "", " ", "x", "\u0000", "<image>", "<image> a <image>", "../../etc/passwd",
       "/no/such/file.png", [], [None], [1, "IMG"], {}, {"a": 1}, "IMG", 10**20, "\u202eé\u200d", "a" * 5000]


def odd_value(rng: random.Random, depth: int = 0):
    if depth < 2 and rng.random() < 0.2:
        return rng.choice([[odd_value(rng, depth + 1) for _ in range(rng.randrange(3))],
                           {key: odd_value(rng, depth + 1) for key in rng.sample(["text", "summary", "sources", "id", "x"], 2)}])
    return rng.choice(ODD)


def crafted(rng: random.Random, record, rate: float):
    """A copy of `record` whose values are each swapped (rate) or dropped (rate / 3), at any depth;
    now and then not an object at all."""
    if rng.random() < 0.03:
        return rng.choice([[], 5, "a line", None])

    def walk(node):
        if isinstance(node, dict):
            for key in list(node):
                draw = rng.random()
                if draw < rate:
                    node[key] = odd_value(rng)
                elif draw < rate * 4 / 3:
                    del node[key]
                else:
                    walk(node[key])
        elif isinstance(node, list):
            for i in range(len(node)):
                if rng.random() < rate:
                    node[i] = odd_value(rng)
                else:
                    walk(node[i])
        return node

    return walk(json.loads(json.dumps(record)))


def crafted_lines(templates: list[dict], rate: float, n: int, id_keys: tuple[str, ...], seed: int) -> list[str]:
    """n crafted lines; most keep a distinct id (id_keys made unique), so the rules after the id run."""
    rng = random.Random(seed)
    lines = []
    for number in range(n):
        record = crafted(rng, rng.choice(templates), rate)
        for key in id_keys:
            if isinstance(record, dict) and isinstance(record.get(key), (str, int)) and not isinstance(record[key], bool) and rng.random() < 0.9:
                record[key] = f"{record[key]}-{number}" if isinstance(record[key], str) else record[key] * 1000 + number
        lines.append(json.dumps(record, ensure_ascii=rng.random() < 0.5))
    return lines


def assert_every_line_read(result, out: Path, lines: list[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if result.returncode != 0:  # a whole-input stop: one line, naming the input
        assert result.stderr.strip().splitlines()[-1].count("error:") == 1, result.stderr[-1000:]
        return
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["rows_in"] == len(lines), report


RATES = [0.03, 0.15]  # a field or two spoiled per record; most of them


@pytest.mark.parametrize("rate", RATES)
def test_attribution_items(tmp_path, rate):
    from PIL import Image

    Image.new("RGB", (8, 8), "red").save(tmp_path / "eye.png")
    lines = crafted_lines([line for line in ATTRIBUTION_LINES if isinstance(line, dict) and "id" in line], rate, 500, ("id",), SEED)
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "items.parquet"
    result = run_stage("attribution_inputs", "--input", f"jsonl={tmp_path / 'items.jsonl'}", "--output", f"source_items={out}", check=False)
    assert_every_line_read(result, out, lines)


@pytest.mark.parametrize("rate", RATES)
def test_eli5_questions(tmp_path, rate):
    templates = [json.loads(line) for line in (REPO / "data/samples/eli5.jsonl").read_text().splitlines()[:4]]
    lines = crafted_lines(templates, rate, 500, ("q_id",), SEED)
    (tmp_path / "eli5.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "queries.parquet"
    result = run_stage("harvest_hub_dataset", "--input", f"data_files={tmp_path / 'eli5.jsonl'}", "--output", f"queries={out}",
                       "--params", json.dumps({"path": "json", "cache_dir": str(tmp_path / "hf")}), check=False)
    assert_every_line_read(result, out, lines)


@pytest.mark.parametrize("rate", RATES)
def test_human_ratings(tmp_path, rate):
    rng = random.Random(SEED)
    templates = [{"id": "s", **{a: rng.choice([0, 1, 2]) for a in ACTIONS}, "rating": rng.choice([1, 2, 3, 4, 5])} for _ in range(10)]
    lines = crafted_lines(templates, rate, 500, ("id",), SEED)
    (tmp_path / "ratings.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "coefficients.json"
    result = run_stage("citeeval_fit", "--input", f"ratings={tmp_path / 'ratings.jsonl'}", "--output", f"coefficients={out}", check=False)
    assert_every_line_read(result, out, lines)


def plain_llm(tmp_path: Path, url: str) -> dict:
    return {"backend": "openai", "openai": {"base_url": url, "api_key_env": "CITEFORGE_TEST_KEY"},
            "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(tmp_path / "images")}


@pytest.mark.parametrize("rate", RATES)
def test_mcitebench_records(tmp_path, rate, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_KEY", "x")
    manifest = make_release(tmp_path / "release")
    lines = crafted_lines(reference_records(), rate, 60, ("question_id",), SEED)
    (tmp_path / "release" / "mcitebench.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "responses.parquet"
    with plain_llm_server() as url:
        result = run_stage("generate_answers", "--input", f"release={manifest}", "--output", f"responses={out}",
                           "--params", json.dumps({"model": "plain", "llm": plain_llm(tmp_path, url)}), check=False)
    assert_every_line_read(result, out, lines)


def m2rag_record(data: Path) -> dict:
    """One M2RAG-Bench record (the published dev_set.jsonl's shape), its images written under data/images."""
    base = "http://0.0.0.0:65535/ELI5/dev_set"

    def image(path: str | None, image_id: int, score, split_id=0):
        if path:
            (data / "images" / path).parent.mkdir(parents=True, exist_ok=True)
            (data / "images" / path).write_bytes(png((20, 80 + image_id, 200)))
        return {"split_id": split_id, "image_id": image_id, "image_url": f"https://example.org/{image_id}.png",
                "cached_image_url": f"{base}/{(path or f'ELI5/dev_set/query-7/webpage-1/{image_id}.png').removeprefix('ELI5/dev_set/')}",
                "valid": True, "final_score": score, "detailed_image_caption": "a blue sky over a field"}

    return {"query_id": 7, "content": "Why is the sky blue?", "level": 1,
            "aux_images": [{k: v for k, v in image("ELI5/dev_set/query-7/9.png", 9, 8).items() if k != "split_id"}],
            "webpages": [{"webpage_id": 0, "url": "https://a.example/sky", "title": "Sky colour", "cleaned_webpage_splits": [
                {"split_id": 0, "text": "Sunlight is scattered by air molecules.", "score": 9},
                {"split_id": 1, "text": "Blue light scatters more than red light.", "score": 8}],
                "images": [image("ELI5/dev_set/query-7/webpage-0/0.png", 0, 9), image(None, 1, 7, split_id=1)]}]}


@pytest.mark.parametrize("rate", RATES)
def test_m2rag_bench_records(tmp_path, rate, monkeypatch):
    monkeypatch.setenv("CITEFORGE_TEST_KEY", "x")
    data = tmp_path / "data"
    (data / "dev_set").mkdir(parents=True)
    lines = crafted_lines([m2rag_record(data)], rate, 60, ("query_id",), SEED)
    (data / "dev_set" / "dev_set.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "responses.parquet"
    with plain_llm_server() as url:
        result = run_stage("m2rag_generate", "--input", f"release={data / 'dev_set' / 'dev_set.jsonl'}", "--output", f"responses={out}",
                           "--params", json.dumps({"model": "plain", "approach": "multi_stage", "llm": plain_llm(tmp_path, url)}),
                           check=False)
    assert_every_line_read(result, out, lines)


@pytest.mark.parametrize("name", ["x" * 5000, "a\u0000b.png"], ids=["too_long", "nul"])
def test_a_record_naming_a_file_no_file_system_can_hold(tmp_path, name, monkeypatch):
    """An image a record names by a path past the file system's length, or holding a NUL, is a file
    that is not there: M2RAG-Bench's image is shown by its caption, MCiteBench's item is the
    record's missing_image; the stage goes on (these were OSError and ValueError tracebacks)."""
    monkeypatch.setenv("CITEFORGE_TEST_KEY", "x")
    data = tmp_path / "data"
    (data / "dev_set").mkdir(parents=True)
    record = m2rag_record(data)
    record["webpages"][0]["images"][0]["cached_image_url"] = f"http://0.0.0.0:65535/ELI5/dev_set/{name}"
    (data / "dev_set" / "dev_set.jsonl").write_text(json.dumps(record) + "\n")
    mcitebench = reference_records()[0]
    manifest = make_release(tmp_path / "release", [mcitebench])
    figure = next(c for c in mcitebench["evidence_contents"] + mcitebench["distractor_contents"] if c.startswith("images/"))
    mcitebench = json.loads(json.dumps(mcitebench).replace(json.dumps(figure), json.dumps(f"images/{name}")))
    (tmp_path / "release" / "mcitebench.jsonl").write_text(json.dumps(mcitebench) + "\n")
    with plain_llm_server() as url:
        m2rag_out, mcitebench_out = tmp_path / "m2rag.parquet", tmp_path / "mcitebench.parquet"
        run_stage("m2rag_generate", "--input", f"release={data / 'dev_set' / 'dev_set.jsonl'}", "--output", f"responses={m2rag_out}",
                  "--params", json.dumps({"model": "plain", "approach": "single_stage", "llm": plain_llm(tmp_path, url)}))
        run_stage("generate_answers", "--input", f"release={manifest}", "--output", f"responses={mcitebench_out}",
                  "--params", json.dumps({"model": "plain", "llm": plain_llm(tmp_path, url)}))
    [response] = pq.read_table(m2rag_out).to_pylist()
    assert [i["shown"] for i in response["inputs"] if i["source"] == "page"][0] == "caption"
    [reject] = pq.read_table(f"{mcitebench_out}.rejects.parquet").to_pylist()
    assert reject["reason"] == "missing_image"


@pytest.mark.parametrize("manifest", ["{not json", '["a list"]', '{"path": 7}', json.dumps({"path": "x" * 5000})],
                         ids=["not_json", "not_an_object", "path_not_text", "path_too_long"])
@pytest.mark.parametrize("stage", ["generate_answers", "m2rag_generate", "mavis_generate_queries"])
def test_a_release_manifest_that_is_not_one_stops_in_one_line(tmp_path, stage, manifest):
    """The evaluations take a release by its manifest ({"path": folder}); a manifest that is not
    JSON, not an object, or names a path that cannot be read stops the stage in one line naming it."""
    path = tmp_path / "release.json"
    path.write_text(manifest)
    output = "queries" if stage.startswith("mavis") else "responses"
    result = run_stage(stage, "--input", f"release={path}", "--output", f"{output}={tmp_path / 'out.parquet'}",
                       "--params", json.dumps({"model": "plain", "llm": {"cache": {"path": str(tmp_path / "c.sqlite")}},
                                               **({"approach": "single_stage"} if stage == "m2rag_generate" else {})}), check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert f"release manifest {path}" in last, last


@pytest.mark.parametrize("content", [b"not an image at all", b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\nshowpage\n",
                                     png((1, 2, 3))[:40]], ids=["text", "eps", "truncated_png"])
def test_an_image_file_that_does_not_read_is_the_records_reject(tmp_path, content):
    """A release image (MAVIS evaluation) or an item's image (attribution) whose bytes are not an
    image Pillow may read (text, an EPS file, which Pillow would hand to Ghostscript, a cut PNG) is
    the record's reject, never a traceback, and no decoder beyond the kept formats runs."""
    from stages.attribution.generate_attributed import summarise
    from stages.core.images import ImageStore
    from stages.core.stage import Reject
    from stages.eval_mavis.mavis_eval import model_image

    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "x.jpg").write_bytes(content)
    with pytest.raises(Reject) as release_image:
        model_image(ImageStore(tmp_path / "store"), tmp_path, {"path": "images/x.jpg"}, 512)
    assert release_image.value.reason == "missing_image" and "is not an image the release keeps" in release_image.value.detail
    item = {"id": "a", "sentences": ["One."], "image": str(tmp_path / "images" / "x.jpg"), "image_position": 1}
    with pytest.raises(Reject) as item_image:
        summarise(None, item, "img_raw", {})
    assert item_image.value.reason == "no_image" and "x.jpg" in item_image.value.detail
