"""The bad-input catalogue: what a user may feed citeforge, and what they get back.

Each test case is one kind of bad input with its expected outcome, run through the stage's real
CLI (tests/conftest.py `run_stage`), as Snakemake runs it. The outcome is one of:
- a reject with a reason code in the stage's `<output>.rejects.parquet` (a bad record never fails
  the whole stage: the other records go on);
- for a whole-input problem, a failed stage with one clear line on stderr naming the input file
  (and, for tables, the table and the column), no traceback, and no output or temp file left.

This file covers records and input tables (JSON lines, Parquet inputs, PDFs in the store, odd
text, releases without images); sibling files cover pushshift dumps (test_pushshift.py), the
runtime (test_runtime.py) and the model layer (test_models.py).
"""
from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import run_stage
from eval_fixtures import llm_params, make_release, reference_records
from mcitebench_fixtures import PAPER, paper_elements, qa_row, write
from stages.core.ids import sha256_hex
from stages.core.images import ImageStore
from stages.core.tables import write_table

RTL_ZW_EMOJI = "\u05dc\u05de\u05d4 \u202eWhy\u202c does\u200b the\u200d sky \U0001f30c look \U0001f469\u200d\U0001f52c blue?"
HUGE = "Why " + "is this title so long " * 4700 + "?"  # about 100 kB


def rejects_of(output: Path) -> dict[str, tuple[str, str]]:
    """id -> (reason, detail) of a stage's rejects sidecar."""
    rows = pq.read_table(f"{output}.rejects.parquet").to_pylist()
    return {r["id"]: (r["reason"], r["detail"]) for r in rows}


def assert_clean_failure(result, folder: Path, *needles: str) -> None:
    """The stage failed with one line naming the problem, no traceback, and left nothing behind."""
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert all(n in last for n in needles), last
    assert not any(folder.iterdir()), list(folder.iterdir())  # no output, sidecar or temp file


# --- ELI5 JSONL (harvest_hub_dataset) ---------------------------------------------------------
def eli5(qid, title, answers=("An answer.",)) -> dict:
    return {"q_id": qid, "title": title, "selftext": "", "subreddit": "explainlikeimfive", "answers": {"text": list(answers)}}


ELI5_LINES = {  # kind -> (the line, the id its reject or row carries, expected reason or None when kept)
    "truncated_line": (json.dumps(eli5("t1", "Why?"))[:25].encode(), "eli5:#0", "bad_json"),
    "json_array": (b'["q1", "Why?"]', "eli5:#1", "bad_record"),
    "json_null": (b"null", "eli5:#2", "bad_record"),
    "json_string": (b'"Why is the sky blue?"', "eli5:#3", "bad_record"),
    "invalid_utf8": (b'{"q_id": "u1", "title": "Why \xff\xfe?"}', "eli5:#4", "bad_json"),
    "id_is_an_object": (json.dumps(eli5({"id": 1}, "Why?")).encode(), "eli5:#5", "wrong_type"),
    "title_is_a_number": (json.dumps(eli5("n1", 42)).encode(), "eli5:n1", "wrong_type"),
    "answers_are_numbers": (json.dumps(eli5("n2", "Why?", answers=(1, 2))).encode(), "eli5:n2", "wrong_type"),
    "duplicate_id": (json.dumps(eli5("ok1", "Why again?")).encode(), "eli5:ok1", "duplicate_id"),
    "rtl_zero_width_emoji_title": (json.dumps(eli5("u8", RTL_ZW_EMOJI)).encode(), "eli5:u8", None),
    "100kB_title": (json.dumps(eli5("big", HUGE)).encode(), "eli5:big", None),
}


@pytest.fixture(scope="module")
def eli5_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eli5")
    data = tmp / "eli5.jsonl"
    lines = [line for line, _, _ in ELI5_LINES.values()]
    lines.insert(len(lines) - 3, json.dumps(eli5("ok1", "Why is ice slippery?")).encode())  # the first ok1, kept
    data.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp / "out" / "queries.parquet"
    params = {"path": "json", "cache_dir": str(tmp / "hf")}
    run_stage("harvest_hub_dataset", "--input", f"data_files={data}", "--output", f"queries={out}", "--params", json.dumps(params))
    return {r["id"]: r for r in pq.read_table(out).to_pylist()}, rejects_of(out), json.loads(Path(f"{out}.report.json").read_text())


@pytest.mark.parametrize("kind", list(ELI5_LINES))
def test_eli5_jsonl_record(eli5_run, kind):
    kept, rejects, report = eli5_run
    line, item, reason = ELI5_LINES[kind]
    if reason is None:
        assert item not in rejects and kept[item]["question"] == json.loads(line)["title"]  # verbatim, whatever the script or length
    else:
        assert rejects[item][0] == reason, rejects.get(item)
    assert report["rows_in"] == len(ELI5_LINES) + 1 == len(kept) + report["rejected"]


# --- MCiteBench JSONL given to generate_answers -----------------------------------------------
def _mcitebench_lines() -> dict[str, tuple[bytes, str, str]]:
    record = reference_records()[0]
    int_id = {**record, "question_id": 12345}
    list_idx = {**copy.deepcopy(record), "question_id": "list-idx", "text_2_idx": list(record["text_2_idx"])}
    missing_image = {**copy.deepcopy(record), "question_id": "dup", "evidence_contents": ["images/absent.jpg"],
                     "image_2_idx": {"images/absent.jpg": "9"}}
    return {  # kind -> (the line, the reject's id, expected reason); line numbers count from 1
        "json_array": (b"[1, 2]", "line:1", "bad_record"),
        "json_null": (b"null", "line:2", "bad_record"),
        "json_string": (b'"a string"', "line:3", "bad_record"),
        "broken_line": (json.dumps(record)[:40].encode(), "line:4", "bad_json"),
        "invalid_utf8": (b'{"question_id": "\xff"}', "line:5", "bad_json"),
        "integer_question_id": (json.dumps(int_id).encode(), "line:6", "bad_record"),
        "list_text_2_idx": (json.dumps(list_idx).encode(), "list-idx", "bad_record"),
        "image_missing_from_release": (json.dumps(missing_image).encode(), "dup", "missing_image"),
        "duplicate_question_id": (json.dumps(missing_image).encode(), "dup", "duplicate_id"),
    }


MCITEBENCH_KINDS = list(_mcitebench_lines())


@pytest.fixture(scope="module")
def mcitebench_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mcitebench")
    manifest = make_release(tmp / "release")
    lines = _mcitebench_lines()
    (tmp / "release" / "mcitebench.jsonl").write_bytes(b"\n".join(line for line, _, _ in lines.values()) + b"\n")
    out = tmp / "out" / "responses.parquet"
    params = {"model": "smol", "llm": llm_params(tmp)}
    run_stage("generate_answers", "--input", f"release={manifest}", "--output", f"responses={out}", "--params", json.dumps(params))
    rows = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    return rows, json.loads(Path(f"{out}.report.json").read_text())


@pytest.mark.parametrize("kind", MCITEBENCH_KINDS)
def test_mcitebench_jsonl_record(mcitebench_run, kind):
    rows, report = mcitebench_run
    _, item, reason = _mcitebench_lines()[kind]
    assert (item, reason) in {(r["id"], r["reason"]) for r in rows}, rows
    assert report["rows_in"] == len(MCITEBENCH_KINDS) == report["rejected"] and report["stats"].get("llm_calls", 0) == 0


# --- Parquet inputs that do not fit their table --------------------------------------------
POST = {"id": "reddit:p1", "post_id": "p1", "subreddit": "askscience", "domain": "Science", "title": "Why is it blue?",
        "selftext": "", "url": "u", "image_urls": ["https://i.redd.it/x.jpg"], "is_gallery": False, "author": "a",
        "created_utc": 1, "score": 3, "num_comments": 1, "over_18": False, "permalink": "/r/x"}
PARQUET_CASES = {  # kind -> (how the posts table is spoiled, the words the error line must hold)
    "missing_column": (lambda t: t.drop_columns(["title"]), "column 'title' is missing"),
    "wrong_column_type": (lambda t: t.set_column(t.schema.get_field_index("score"), "score", pa.array(["three"])),
                          "column 'score' is string, expected int64"),
    "not_parquet": (None, "is not a readable Parquet file"),
}


@pytest.mark.parametrize("kind", list(PARQUET_CASES))
def test_parquet_input_that_does_not_fit_its_table(tmp_path, kind):
    spoil, words = PARQUET_CASES[kind]
    posts, comments = tmp_path / "posts.parquet", tmp_path / "comments.parquet"
    write_table(comments, [], "reddit_comments")
    if spoil is None:
        posts.write_text("id,title\nreddit:p1,Why?\n")
    else:
        write_table(posts, [POST], "reddit_posts")
        pq.write_table(spoil(pq.read_table(posts)), posts)
    out = tmp_path / "out"
    out.mkdir()
    result = run_stage("filter_questions", "--input", f"posts={posts}", "--input", f"comments={comments}",
                       "--output", f"questions={out / 'questions.parquet'}", "--output", f"instances={out / 'instances.parquet'}",
                       "--param", "question_words=[why]", check=False)
    assert_clean_failure(result, out, "filter_questions: error: input 'posts'", str(posts), "reddit_posts", words)


# --- PDFs in the store (parse_pdfs), each rejected before MinerU is asked ---------------------
def _pdf(encrypt: bool = False) -> bytes:
    canvas = pytest.importorskip("reportlab.pdfgen.canvas")
    encryption = pytest.importorskip("reportlab.lib.pdfencrypt").StandardEncryption("secret") if encrypt else None
    out = io.BytesIO()
    c = canvas.Canvas(out, invariant=1, encrypt=encryption)
    c.drawString(72, 720, "A paper with a text layer.")
    c.showPage()
    c.save()
    return out.getvalue()


PDF_CASES = {  # kind -> (the stored bytes, expected reason)
    "zero_bytes": (lambda: b"", "not_a_pdf"),
    "html_in_the_store": (lambda: b"<!DOCTYPE html><html><body>502 Bad Gateway</body></html>", "not_a_pdf"),
    "encrypted": (lambda: _pdf(encrypt=True), "encrypted_pdf"),
    "corrupt": (lambda: b"%PDF-1.4\n1 0 obj <<garbage\n%%EOF\n", "corrupt_pdf"),
    "truncated": (lambda: _pdf()[:300], "corrupt_pdf"),
}


@pytest.mark.parametrize("kind", list(PDF_CASES))
def test_pdf_in_the_store(tmp_path, kind):
    make, reason = PDF_CASES[kind]
    data, store = make(), tmp_path / "pdfs"
    sha = sha256_hex(data)
    (store / sha[:2]).mkdir(parents=True)
    (store / sha[:2] / f"{sha}.pdf").write_bytes(data)
    paper = {"id": f"openreview:{kind}", "forum": kind, "number": 1, "title": kind, "abstract": None, "keywords": [],
             "venueid": "v", "decision": None, "withdrawn": False, "pdf_sha256": sha, "cdate": 0}
    papers = write(tmp_path / "papers.parquet", [paper], "mcitebench_papers")
    out = tmp_path / "elements.parquet"
    params = {"pdf_store": str(store), "image_store": str(tmp_path / "images"), "server_url": "http://127.0.0.1:9"}  # never asked
    run_stage("parse_pdfs", "--input", f"papers={papers}", "--output", f"elements={out}", "--params", json.dumps(params))
    assert rejects_of(out)[paper["id"]][0] == reason
    assert pq.read_table(out).num_rows == 0


# --- a release whose images are gone ----------------------------------------------------------
@pytest.mark.parametrize("gone", ["files", "names"])
def test_release_without_images(tmp_path, gone):
    """The figures and tables of the parsed paper are missing from the image store, or their
    elements name no image (a null image_sha256, which the contract allows for text): their
    questions are rejected `image_missing`, the text questions are released."""
    store = ImageStore(tmp_path / "images")
    elements = paper_elements(store)
    el = write(tmp_path / "elements.parquet", elements, "mcitebench_elements")
    qas = [
        qa_row(PAPER, "explanation", "How much does the gate contribute?", "See Table 2.", source="t1"),
        qa_row(PAPER, "explanation", "How does accuracy scale?", "Section 4.3 explains it.", source="t2"),
    ]
    qa = write(tmp_path / "qa.parquet", qas, "mcitebench_qa")
    run_stage("pair_evidence", "--input", f"qa={qa}", "--input", f"elements={el}",
              "--output", f"questions={tmp_path}/paired.parquet", "--output", f"evidence={tmp_path}/evidence.parquet",
              "--output", f"pairing_sheet={tmp_path}/pairing_sheet.csv")
    write(tmp_path / "none.parquet", [], "mcitebench_distractors")
    if gone == "files":
        for image in (tmp_path / "images").rglob("*.png"):
            image.unlink()
    else:  # the elements the release reads name no image
        el = write(tmp_path / "unnamed.parquet", [dict(e, image_sha256=None) for e in elements], "mcitebench_elements")
    manifest = tmp_path / "out" / "release.json"
    run_stage("release_mcitebench", "--input", f"questions={tmp_path}/paired.parquet", "--input", f"evidence={tmp_path}/evidence.parquet",
              "--input", f"distractors={tmp_path}/none.parquet", "--input", f"elements={el}", "--output", f"manifest={manifest}",
              "--params", json.dumps({"releases_dir": str(tmp_path / "releases"), "image_store": str(store.root)}))
    reasons = {i: r for i, (r, _) in rejects_of(manifest).items()}
    assert reasons == {qas[0]["id"]: "image_missing"}
    assert json.loads(manifest.read_text())["tables"]["questions"] == 1
