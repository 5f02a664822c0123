"""citeeval_from_m2rag: M2RAG evaluation responses become the shared citeeval_responses table,
through the stage's real CLI on hand-made m2rag_responses rows: pages are passages 1..P, input
images P + n given as their captions (or labels), each placed image becomes its passage's marker
on its own line, an unresolved placeholder is removed, and a response given nothing is rejected."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table

ANSWER = ("Sourdough rises because wild yeast makes gas.\n![a loaf](image_2)\nThe starter is flour and water. "
          "![bad](image_9)\nIt needs hours to ferment.\n![crumb](image_1)")


def _image(n, caption):
    return {"n": n, "source": "page", "page_rank": 1, "url": f"https://x.test/{n}.jpg", "sha256": f"{n:064x}", "thumb_sha256": "",
            "caption": caption, "caption_mode": "image", "score": 8.0, "shown": "caption"}


def _response(rid, contexts, inputs, text=ANSWER):
    found = [{"n": 2, "start": text.index("![a loaf]"), "end": text.index("(image_2)") + 9},
             {"n": 1, "start": text.index("![crumb]"), "end": text.index("(image_1)") + 9}] if inputs else []
    return {"id": rid, "model": "cand", "approach": "single_stage", "query_id": "q1", "query": "Why does sourdough rise?", "vision": False,
            "contexts": contexts, "inputs": inputs, "response": text, "output_images": found,
            "unresolved": ["![bad](image_9)"] if inputs else [], "placements_json": None, "calls": 1, "prompt_tokens": 10,
            "completion_tokens": 10, "truncated_calls": 0, "topic": "Science & Mathematics"}


def test_m2rag_responses_cite_their_placed_images(tmp_path):
    contexts = [{"page_rank": 2, "title": "Forum", "text": "Bread talk."}, {"page_rank": 1, "title": "Explainer", "text": "Yeast makes CO2."}]
    rows = [_response("r1", contexts, [_image(1, "A crumb with holes."), _image(2, "")]),
            _response("r2", [], [], text="Nothing to go on.")]
    src = tmp_path / "responses.parquet"
    write_table(src, rows, "m2rag_responses")
    out = tmp_path / "ce.parquet"
    run_stage("citeeval_from_m2rag", "--input", f"responses={src}", "--output", f"responses={out}")
    [got] = pq.read_table(out).to_pylist()
    assert [(p["id"], p["title"], p["text"], p["mode"]) for p in got["passages"]] == [
        (1, "Explainer", "Yeast makes CO2.", "text"), (2, "Forum", "Bread talk.", "text"),
        (3, "Image 1", "A crumb with holes.", "caption"), (4, "Image 2", "Image 2 (no caption is available)", "label")]
    assert got["response"] == ("Sourdough rises because wild yeast makes gas.\n\n[4]\n\nThe starter is flour and water. \n"
                               "It needs hours to ferment.\n\n[3]\n")
    assert (got["model"], got["source"], got["mode"]) == ("cand [single_stage]", "m2rag", "caption+label")
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("r2", "no_inputs")]
    report = json.loads(out.with_name("ce.parquet.report.json").read_text())
    assert report["stats"]["image_citations"] == 2 and report["stats"]["unresolved_placeholders"] == 1
    assert report["rows_in"] == 2 == report["rows_out"]["responses"] + report["rejected"]

    # citeeval_prepare gives each image marker to the sentence before it (its line opens no statement)
    prepared, statements = tmp_path / "prepared.parquet", tmp_path / "statements.parquet"
    run_stage("citeeval_prepare", "--input", f"responses={out}", "--output", f"responses={prepared}", "--output",
              f"statements={statements}", "--output", f"export={tmp_path / 'export.json'}")
    got = [(s["sentence"], s["citations"]) for s in pq.read_table(statements).to_pylist()]
    assert got == [("Sourdough rises because wild yeast makes gas.", [4]), ("The starter is flour and water.", []),
                   ("It needs hours to ferment.", [3])]
