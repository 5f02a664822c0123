"""mavis_generate_answers through its CLI (mavis.txt §3.1 step 3, §5.2, App. C.2 Tables 16-18) on the
tiny fixture release and hand-written retrieval lists, the candidate a local OpenAI-compatible
server on 127.0.0.1 answering by rule: documents numbered from 1 in (query, rank) order with repeats
once; a <thinking> block removed from the scored answer of every method (the seed's generation
strips it for Vanilla too) and kept in the raw one; +KE answers written from the Table 18
extractions; a text-only model reads an image document through its text stand-in; a failed
answer or extraction is a response with its `error` (scored as the paper's code counts it), not
a reject; each response counts the instance's gold documents by modality; the (instance,
setting, method) items in = responses."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_stage
from mavis_eval_fixtures import build_release
from stages.core.ids import content_id
from stages.core.tables import write_table

TOMATO, BIRD = "reddit:p1/c1", "reddit:p2/c2"
RETRIEVED = [  # (instance, setting, query index, rank, doc id): the tomato's second query repeats both documents
    (TOMATO, "text", 0, 1, "d:t1"), (TOMATO, "text", 0, 2, "d:t2"), (TOMATO, "text", 1, 1, "d:t2"), (TOMATO, "text", 1, 2, "d:t1"),
    (BIRD, "multi", 0, 1, "d:i2"), (BIRD, "multi", 0, 2, "d:t3")]
EXTRACTED = {"nitrogen deficiency": "Nitrogen-poor tomatoes yellow from the oldest leaves.",
             "Water tomatoes": "Watering at the base keeps tomato leaves dry."}
METHODS = ["vanilla", "cot", "vanilla_ke"]


def _reply(content: str) -> Response:
    body = {"id": "c1", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def by_rule(seen):
    def handler(request):
        content = request.get_json()["messages"][-1]["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        seen.append(text)
        if text.startswith("Write down the factual information"):  # Table 18; the bird image's extraction comes back empty
            return _reply(next((fact for key, fact in EXTRACTED.items() if key in text), ""))
        if "<thinking>" in text:  # Table 17
            return _reply("<thinking>Document [1] is relevant.</thinking>\nThe answer is in the first document [1].")
        if "bird" in text:  # Table 16 for the bird: an empty (failed) answer
            return _reply("")
        return _reply("<thinking>Both documents.</thinking>The leaves lack nitrogen [1]. Water at the base [2].")
    return handler


def test_numbered_documents_methods_and_rejects(tmp_path, httpserver: HTTPServer):
    manifest = build_release(tmp_path / "rel" / "v1")
    retrieved = tmp_path / "retrieved.parquet"
    write_table(retrieved, [{"id": f"mr:{i}:{s}:{q}:{r}", "model": "cand", "instance_id": i, "setting": s, "query_index": q, "query": "q",
                             "rank": r, "doc_id": d, "modality": "image" if d.startswith("d:i") else "text", "score": 1.0 / r,
                             "retriever": "minilm"} for i, s, q, r, d in RETRIEVED], "mavis_eval_retrieved")
    seen = []
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(by_rule(seen))
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(tmp_path / "store"),
           "max_attempts": 1, "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    out = tmp_path / "responses.parquet"
    run_stage("mavis_generate_answers", f"--input=retrieved={retrieved}", f"--input=release={manifest}", f"--output=responses={out}",
              "--params", json.dumps({"model": "cand", "llm": llm, "vision": False, "methods": METHODS}))
    rows = {(r["instance_id"], r["method"]): r for r in pq.read_table(out).to_pylist()}
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    report = json.loads(open(f"{out}.report.json").read())

    def rid(instance, setting, method):
        return content_id("mresp", "cand", instance, setting, method)

    assert set(rows) == {(i, m) for i in (TOMATO, BIRD) for m in METHODS} and rejects == []
    assert report["rows_in"] == 2 * len(METHODS) == len(rows) + report["rejected"] and report["stats"]["failed_generations"] == 2
    bird, bird_ke = rows[(BIRD, "vanilla")], rows[(BIRD, "vanilla_ke")]
    assert (bird["answer"], bird["error"].split(":")[0]) == ("", "empty")  # empty after the retries: a failed generation
    assert bird_ke["answer"] == "" and bird_ke["error"].startswith("extraction_failed: Table 18 failed for ['d:i2', 'd:t3']: empty")

    vanilla = rows[(TOMATO, "vanilla")]
    assert [(d["number"], d["doc_id"]) for d in vanilla["documents"]] == [(1, "d:t1"), (2, "d:t2")]  # repeats once
    assert vanilla["answer"] == "The leaves lack nitrogen [1]. Water at the base [2]."  # the thinking block goes for Vanilla too
    assert vanilla["raw"].startswith("<thinking>") and vanilla["error"] is None
    assert (vanilla["id"], vanilla["setting"], vanilla["vision"], vanilla["gold_answer"][:6]) == (rid(TOMATO, "text", "vanilla"), "text", False, "Yellow")
    # the fixture's only entailed fact document is d:t1, for the tomato: one text positive, no image
    assert (vanilla["positive_text_documents"], vanilla["positive_image_documents"]) == (1, 0)
    assert (bird["positive_text_documents"], bird["positive_image_documents"]) == (0, 0)
    cot = rows[(BIRD, "cot")]
    assert [(d["number"], d["doc_id"], d["modality"]) for d in cot["documents"]] == [(1, "d:i2", "image"), (2, "d:t3", "text")]
    assert cot["answer"] == "The answer is in the first document [1]." and cot["raw"].startswith("<thinking>")
    ke = rows[(TOMATO, "vanilla_ke")]
    assert [d["extraction"] for d in ke["documents"]] == [EXTRACTED["nitrogen deficiency"], EXTRACTED["Water tomatoes"]]
    # the +KE answer prompt lists the extractions in place of the documents; the bird image is read through its stand-in
    ke_prompt = next(t for t in seen if "(the facts each one states)" in t)
    assert EXTRACTED["nitrogen deficiency"] in ke_prompt and "Tomato plants with nitrogen deficiency" not in ke_prompt
    bird_prompt = next(t for t in seen if "<thinking>" in t and "bird" in t)
    assert "(image, described in words) A red bird with a crest" in bird_prompt and "cannot see" in bird_prompt


def test_a_document_the_release_does_not_hold_stops_the_stage_naming_it(tmp_path):
    """Retrieved rows from another release: the stage stops before any model call, naming the
    input, the document and its instance (no traceback)."""
    manifest = build_release(tmp_path / "rel" / "v1")
    retrieved = tmp_path / "retrieved.parquet"
    write_table(retrieved, [{"id": "mr:1", "model": "cand", "instance_id": TOMATO, "setting": "text", "query_index": 0, "query": "q",
                             "rank": 1, "doc_id": "d:elsewhere", "modality": "text", "score": 1.0, "retriever": "minilm"}], "mavis_eval_retrieved")
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(tmp_path / "store"),
           "openai": {"base_url": "http://127.0.0.1:9/v1"}}
    out = tmp_path / "responses.parquet"
    done = run_stage("mavis_generate_answers", f"--input=retrieved={retrieved}", f"--input=release={manifest}", f"--output=responses={out}",
                     "--params", json.dumps({"model": "cand", "llm": llm, "vision": False, "methods": ["vanilla"]}), check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"retrieved: document d:elsewhere (instance {TOMATO}) is not in the release" in done.stderr
    assert not out.exists()


def test_a_release_image_hash_not_in_hex_names_no_image():
    """A release folder is read without a contract: an image document whose sha256 is not one in
    hex (a path, a glob) keeps no hash, so its image is missing_image, never a file elsewhere."""
    from stages.eval_mavis.mavis_generate_answers import numbered_documents

    docs = {d: {"doc_id": d, "modality": "image", "text": "", "image_sha256": sha}
            for d, sha in (("d:ok", "ab" * 32), ("d:path", "../../etc/x"), ("d:glob", "ab*"))}
    rows = [{"instance_id": "i", "query_index": 0, "rank": r, "doc_id": d} for r, d in enumerate(docs, 1)]
    assert [d["image_sha256"] for d in numbered_documents(rows, docs)] == ["ab" * 32, None, None]
