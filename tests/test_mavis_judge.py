"""mavis_judge and mavis_score through their CLIs, the judge an OpenAI-compatible server on
127.0.0.1 that labels by rule: fixed labels, one failed call (missing in strict, 0 in reference),
an image document shown as an image, a citation to a missing document, a repeated citation, an
empty answer and a failed generation; both scorings' calls (the reference ones as MAVIS's public
scripts ask them) and every expected number worked out by hand."""
from __future__ import annotations

import json

import duckdb
import pyarrow.parquet as pq
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

from conftest import run_stage
from mavis_eval_fixtures import build_release
from stages.core.tables import write_table

ANSWER = ("Tomatoes need nitrogen [1][1]. Water them at the base [2][5]. They are lovely plants. "
          "Yellow lower leaves show a deficiency [1, 3].")


def _reply(content: str) -> Response:
    body = {"id": "c1", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def judge_by_rule(request):
    content = request.get_json()["messages"][-1]["content"]
    text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
    has_image = not isinstance(content, str) and any(p.get("type") == "image_url" for p in content)
    if "Fact:" in text:  # Table 13
        fact = text.rsplit("Fact:", 1)[1].split("\n")[0]
        return _reply(json.dumps({"label": "Fully addressed" if "Nitrogen" in fact else "Partially addressed"}))
    statement = text.rsplit("Statement:", 1)[1].split("\n")[0]
    if "Documents:" not in text:  # Table 14
        label = "Not relevant" if "lovely" in statement else "Partially relevant" if "Water" in statement else "Fully relevant"
        return _reply(json.dumps({"label": label}))
    documents = text.split("Documents:", 1)[1].count("\n[")  # Table 12
    if "deficiency" in statement:
        if has_image and documents == 1:
            return _reply("I cannot tell")  # invalid: the judge call for document 3 alone fails
        return _reply(json.dumps({"label": "partially support" if documents == 2 else "fully support"}))
    return _reply(json.dumps({"label": "fully support" if "nitrogen" in statement else "partially support"}))


LONG_GOLD = "Nitrogen deficiency yellows the lower leaves first. " * 11  # 572 characters: over groundedness.py's 500


def _response(method, answer, documents, error=None, split="test"):
    return {"id": f"resp-{method}", "model": "m", "instance_id": "reddit:p1/c1", "split": split, "setting": "multi", "method": method,
            "question": "Why are the leaves of my tomato plant turning yellow?", "gold_answer": LONG_GOLD, "retriever": "test",
            "vision": True, "documents": documents, "raw": "upstream error" if error else answer, "answer": answer, "finish_reason": "stop",
            "error": error, "positive_text_documents": 1, "positive_image_documents": 0}


def run_judge(tmp_path, httpserver: HTTPServer, responses, manifest, vision: bool):
    """mavis_judge's CLI on `responses` against the rule judge on 127.0.0.1: (judgements, sentences) paths."""
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(judge_by_rule)
    llm = {"backend": "openai", "model": "rule", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(tmp_path / "store"),
           "max_attempts": 1, "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    judgements, sentences = tmp_path / "judgements.parquet", tmp_path / "sentences.parquet"
    run_stage("mavis_judge", f"--input=responses={responses}", f"--input=release={manifest}", f"--output=judgements={judgements}",
              f"--output=sentences={sentences}", "--params", json.dumps({"judge": "rule", "llm": llm, "vision": vision}))
    return judgements, sentences


def test_judge_labels_to_scores(tmp_path, httpserver: HTTPServer):
    manifest = build_release(tmp_path / "rel" / "v1")
    con = duckdb.connect()
    sha = con.execute(f"select image_sha256 from '{tmp_path}/rel/v1/parquet/documents.parquet' where doc_id = 'd:i1'").fetchone()[0]
    documents = [{"number": 1, "doc_id": "d:t1", "modality": "text", "text": "Nitrogen deficiency yellows lower leaves.", "image_sha256": None, "extraction": None},
                 {"number": 2, "doc_id": "d:t2", "modality": "text", "text": "Water at the base.", "image_sha256": None, "extraction": None},
                 {"number": 3, "doc_id": "d:i1", "modality": "image", "text": "A yellowing tomato leaf.", "image_sha256": sha, "extraction": None}]
    responses = tmp_path / "responses.parquet"
    write_table(responses, [_response("vanilla", ANSWER, documents), _response("cot", "", documents, split="train"),
                            _response("vanilla_ke", "", documents, error="backend: HTTP 500 from x")], "mavis_eval_responses")
    judgements, sentences = run_judge(tmp_path, httpserver, responses, manifest, vision=True)
    rows = con.execute(f"select kind, sentence_index, doc_number, score, ok from '{judgements}' "
                       "where response_id = 'resp-vanilla' and scoring = 'strict' order by all").fetchall()
    assert rows == sorted([
        ("completeness", None, None, 1.0, True), ("completeness", None, None, 0.5, True),
        ("relevance", 0, None, 1.0, True), ("relevance", 1, None, 0.5, True), ("relevance", 2, None, 0.0, True), ("relevance", 3, None, 1.0, True),
        ("support", 0, None, 1.0, True), ("support", 1, None, 0.5, True), ("support", 3, None, 0.5, True),
        ("support_doc", 0, 1, 1.0, True), ("support_doc", 1, 2, 0.5, True), ("support_doc", 3, 1, 1.0, True),
        ("support_doc", 3, 3, None, False),  # the failed call: no score; document 5 does not exist, so no call
    ], key=lambda r: tuple((x is None, x) for x in r))
    # reference: the public scripts' statements. groundedness: "Tomatoes need nitrogen" [1],[1] (the repeat kept),
    # "Water them at the base" [2] (5 > 3 dropped), "Yellow lower leaves show a deficiency" [1, 3]; the uncited
    # sentence is no statement. Relevance: the same three statements, judged with the gold answer shown.
    rows = con.execute(f"select kind, sentence_index, citation, doc_number, score, ok from '{judgements}' "
                       "where response_id = 'resp-vanilla' and scoring = 'reference' order by all").fetchall()
    assert rows == sorted([
        ("completeness", None, None, None, 1.0, True), ("completeness", None, None, None, 0.5, True),
        ("relevance", 0, None, None, 1.0, True), ("relevance", 1, None, None, 0.5, True), ("relevance", 2, None, None, 1.0, True),
        ("support", 0, None, None, 1.0, True), ("support", 1, None, None, 0.5, True), ("support", 2, None, None, 0.5, True),
        ("support_doc", 0, 0, 1, 1.0, True), ("support_doc", 0, 1, 1, 1.0, True),  # one citation alone: no extra call for s1
        ("support_doc", 2, 0, 1, 1.0, True), ("support_doc", 2, 1, 3, None, False),
    ], key=lambda r: tuple((x is None, x) for x in r))
    bodies = [json.dumps(r.get_json()) for r, _ in httpserver.log]
    relevance_asked = [b for b in bodies if "Answer: Nitrogen deficiency yellows" in b]
    assert len(relevance_asked) == 3 and not any("image_url" in b for b in relevance_asked)  # gold answer shown, image not
    assert any("Fact:" in b and "Tomatoes need nitrogen [1][1]." in b for b in bodies)  # completeness sees the answer as written
    # the empty answer and the failed generation ask nothing: their facts are not addressed, without a call
    assert con.execute(f"select scoring, kind, score, raw from '{judgements}' where response_id = 'resp-cot' order by scoring").fetchall() == \
        [("reference", "completeness", 0.0, "(empty answer: not sent to the judge)")] * 2 + [("strict", "completeness", 0.0, "(empty answer: not sent to the judge)")] * 2
    assert {r[0] for r in con.execute(f"select raw from '{judgements}' where response_id = 'resp-vanilla_ke'").fetchall()} == \
        {"(failed generation: not sent to the judge)"}
    scores, summary = tmp_path / "scores.parquet", tmp_path / "summary.parquet"
    run_stage("mavis_score", f"--input=responses={responses}", f"--input=sentences={sentences}", f"--input=judgements={judgements}",
              f"--output=scores={scores}", f"--output=summary={summary}", "--params", json.dumps({"mauve_featurizer": "sentence-encoder"}))
    got = {(r["method"], r["scoring"]): r for r in pq.read_table(scores).to_pylist()}
    strict, reference = got[("vanilla", "strict")], got[("vanilla", "reference")]
    assert strict["completeness"] == pytest.approx((1 + 0.5) / 2)
    assert strict["relevance"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)
    assert strict["recall"] == pytest.approx((1 + 0.5 + 0 + 0.5) / 4)  # the uncited sentence counts 0
    assert strict["precision"] is None and strict["groundedness_f1"] is None  # a failed call: missing, never 0
    assert (strict["used_text"], strict["used_image"], strict["utilisation_text"], strict["utilisation_image"]) == (2.0, 1.0, 1.0, 1.0)
    assert strict["precision_text"] == pytest.approx((1 + 0.5 + 1) / 3) and strict["precision_image"] is None
    assert strict["failed_judge_calls"] == 1
    # reference, by groundedness.py / relevance.py / completeness.py
    assert reference["completeness"] == pytest.approx((1 + 0.5) / 2)
    assert reference["relevance"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert reference["recall"] == pytest.approx((1 + 0.5 + 0.5) / 3)  # keys i_0 of the three statements
    # precision: s0 (1 + 1) / 2; s1 one citation: i_1 = i_0 = 0.5; s2 (1 + 0 for the failed "Error" label) / 2
    assert reference["precision"] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert reference["precision_image"] == 0.0  # the one citation of the image document alone: the failed call, 0
    empty = got[("cot", "strict")]
    assert (empty["completeness"], empty["relevance"], empty["recall"], empty["precision"], empty["n_sentences"]) == (0.0, 0.0, 0.0, 0.0, 0)
    # the failed generation: strict an empty answer (0 everywhere); reference the public client's "Error" answer:
    # completeness 0, relevance left out (relevance.py drops answers containing "Error"), no citation -> recall 0, precision 0
    failed = got[("vanilla_ke", "strict")]
    assert (failed["completeness"], failed["relevance"], failed["recall"], failed["precision"]) == (0.0, 0.0, 0.0, 0.0)
    failed = got[("vanilla_ke", "reference")]
    assert (failed["completeness"], failed["relevance"], failed["recall"], failed["precision"]) == (0.0, None, 0.0, 0.0)
    # the summary: strict precision of the vanilla answer is missing, counted
    row = con.execute(f"select value, n, missing from '{summary}' where method = 'vanilla' and scoring = 'strict' and metric = 'precision'").fetchone()
    assert row == (None, 0, 1)
    row = con.execute(f"select value, missing, note from '{summary}' where method = 'vanilla_ke' and scoring = 'reference' and metric = 'relevance'").fetchone()
    assert row[:2] == (None, 1) and "Error" in row[2]
    # splits are summarised apart: the vanilla answers are of the test split, the empty CoT one of train
    assert con.execute(f"select distinct split, method from '{summary}' order by 1, 2").fetchall() == [
        ("test", "vanilla"), ("test", "vanilla_ke"), ("train", "cot")]
    assert {r["split"] for r in got.values() if r["method"] == "cot"} == {"train"}


def test_documents_not_numbered_as_shown_are_a_reject(tmp_path, httpserver: HTTPServer):
    """A citation [k] is the k-th document shown: a response whose documents are not numbered 1..n in
    order (a crafted or damaged row) is rejected with its numbers, before any call; the others are judged."""
    manifest = build_release(tmp_path / "rel" / "v1")
    doc = lambda n: {"number": n, "doc_id": f"d:t{n}", "modality": "text", "text": "Nitrogen.", "image_sha256": None, "extraction": None}  # noqa: E731
    responses = tmp_path / "responses.parquet"
    write_table(responses, [_response("vanilla", "Tomatoes need nitrogen [1].", [doc(2), doc(3)]),
                            _response("cot", "Tomatoes need nitrogen [1].", [doc(1)])], "mavis_eval_responses")
    judgements, _ = run_judge(tmp_path, httpserver, responses, manifest, vision=False)
    rejects = pq.read_table(f"{judgements}.rejects.parquet").to_pylist()
    assert [(r["id"], r["reason"]) for r in rejects] == [("resp-vanilla", "bad_documents")] and "[2, 3]" in rejects[0]["detail"]
    judged = {r["response_id"] for r in pq.read_table(judgements).to_pylist()}
    assert judged == {"resp-cot"}
    report = json.loads((tmp_path / "judgements.parquet.report.json").read_text())
    assert (report["rows_in"], report["rejected"], report["stats"]["responses_judged"]) == (2, 1, 1)
