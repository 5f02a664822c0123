"""extract_explanation_qa: every triple of a thread, each with only its own references.

The triple-splitting path runs against an OpenAI-compatible server on 127.0.0.1 that answers by
rule (one triple per numbered point the response answers), so the stage's own logic is what is
tested: span location, evidence from the span only, the deterministic checks, splitting of long
threads and the count invariant. The embedded model runs the same stage once for the cache and
prompt-edit behaviour (its triples are poor, and the deterministic checks reject them)."""
import json
import re
import shutil

import pyarrow.parquet as pq
from pytest_httpserver import HTTPServer
from werkzeug import Response

from stages.core.prompts import PROMPTS_DIR
from stages.core.refs import parse_refs
from stages.mcitebench.extract_explanation_qa import numbered, sentence_spans, split_parts
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, write


def thread(tid, question, response):
    return {"id": tid, "paper_id": PAPER, "question_note_id": f"n{tid}", "reviewer_signature": "Reviewer_x",
            "question_text": question, "response_note_ids": [f"r{tid}"], "response_text": response}


THREE_POINTS = thread(
    "t3p",
    "1. Is the method faster than the baseline? 2. How were the hyperparameters tuned? 3. Does it scale to larger models?",
    "Thank you for the review.\n\n"
    "(1) Yes, training takes three hours instead of five on the same hardware, see Table 3 and Figure 2.\n\n"
    "(2) We tuned the learning rate on the validation split with a grid search, as described in Section 4.1, Line 12.\n\n"
    "(3) We leave larger models to future work and do not claim anything about them.",
)


def rule_based_triples(request):
    """One triple per numbered point "(n)" of the response; the span is given by the numbers of the
    sentences the point runs over, as the prompt asks."""
    prompt = request.get_json()["messages"][-1]["content"]
    response = prompt.split("# Authors' response", 1)[1].split("# JSON Output Format", 1)[0]
    sentences = re.findall(r"^\[(\d+)\] (.*)$", response, re.MULTILINE)
    triples, point = [], None
    for number, text in sentences:
        opens = re.match(r"\((\d)\) ", text)
        if opens:
            point = {"question": f"What does point {opens.group(1)} of the review ask about the method?",
                     "answer_from": int(number), "answer_to": int(number), "evidence": "", "valid": True, "reason": "answered"}
            triples.append(point)
        elif point is not None:
            point["answer_to"] = int(number)
        if point is not None:
            point["evidence"] = ", ".join(filter(None, [point["evidence"], *(r.label for r in parse_refs(text))]))
    body = {"id": "c1", "object": "chat.completion", "model": "rules",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps({"triples": triples})}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def _run(tmp_path, name, llm, **params):
    out = tmp_path / name
    run_stage("extract_explanation_qa", "--input", f"threads={tmp_path}/threads.parquet", "--output", f"qa={out}/qa.parquet",
              "--params", json.dumps({"llm": llm, **params}))
    qa = pq.read_table(out / "qa.parquet").to_pylist()
    rejects = pq.read_table(out / "qa.parquet.rejects.parquet").to_pylist()
    return qa, rejects, json.loads((out / "qa.parquet.report.json").read_text())


def _server_llm(tmp_path, httpserver):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(rule_based_triples)
    return {"backend": "openai", "model": "rules", "cache": {"path": str(tmp_path / "llm.sqlite")},
            "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}


def test_three_points_in_one_rebuttal_give_three_triples_with_their_own_references(tmp_path, httpserver: HTTPServer):
    write(tmp_path / "threads.parquet", [THREE_POINTS], "mcitebench_threads")
    qa, rejects, report = _run(tmp_path, "out", _server_llm(tmp_path, httpserver))
    assert [row["references"] for row in qa] == [["Table 3", "Figure 2"], ["Section 4.1, Line 12"]]
    assert qa[0]["answer"].startswith("(1) Yes, training takes") and qa[0]["answer"].endswith("Table 3 and Figure 2.")
    assert "Section 4.1" not in qa[0]["answer"] and "Table 3" not in qa[1]["answer"]
    assert len({row["id"] for row in qa}) == 2 and all(row["source_id"] == "t3p" for row in qa)
    # the point the authors did not answer with evidence gives no triple: its span cites nothing
    assert [r["reason"] for r in rejects] == ["no_explicit_reference"]
    assert report["rows_in"] == 3 == len(qa) + report["rejected"]


def test_long_threads_are_split_so_no_point_is_missed(tmp_path, httpserver: HTTPServer):
    filler = "Thank you for the careful reading of the paper. " * 12
    long = thread("long", "Please answer the two points below.", filler + "\n\n" + THREE_POINTS["response_text"])
    write(tmp_path / "threads.parquet", [long], "mcitebench_threads")
    qa, rejects, report = _run(tmp_path, "out", _server_llm(tmp_path, httpserver), max_prompt_chars=200)
    assert report["stats"]["parts_split"] > 0 and report["stats"]["llm_calls"] > 1
    assert sorted(ref for row in qa for ref in row["references"]) == ["Figure 2", "Section 4.1, Line 12", "Table 3"]
    assert report["rows_in"] == len(qa) + report["rejected"]


def test_split_parts_keeps_every_character_of_text():
    text = "First paragraph. " * 30 + "\n\n" + "x" * 450 + "\n\nLast one."
    parts = split_parts(text, 100)
    assert all(len(p) <= 100 for p in parts)
    assert "".join(parts).replace("\n", "").replace(" ", "") == text.replace("\n", "").replace(" ", "")


def test_sentences_are_numbered_and_spans_cut_from_the_text():
    text = "We agree.  Removing the gate costs 4.1 points,\nas shown in Table 2. Thanks."
    spans = sentence_spans(text)
    assert numbered(text, spans) == "[1] We agree.\n[2] Removing the gate costs 4.1 points, as shown in Table 2.\n[3] Thanks."
    assert text[spans[1][0]:spans[1][1]] == "Removing the gate costs 4.1 points,\nas shown in Table 2."
    assert sentence_spans("  ") == []


def test_out_of_range_and_reversed_spans_are_rejects(tmp_path, httpserver: HTTPServer):
    def answer(request):
        triples = [{"question": "Is the method faster than the baseline?", "answer_from": a, "answer_to": b,
                    "evidence": "Table 3", "valid": True, "reason": "answered"} for a, b in [(2, 9), (3, 2), (2, 2)]]
        body = {"id": "c1", "object": "chat.completion", "model": "rules",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps({"triples": triples})}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
        return Response(json.dumps(body), content_type="application/json")
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(answer)
    llm = {"backend": "openai", "model": "rules", "cache": {"path": str(tmp_path / "llm.sqlite")},
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    write(tmp_path / "threads.parquet", [THREE_POINTS], "mcitebench_threads")
    qa, rejects, report = _run(tmp_path, "out", llm)
    assert [r["reason"] for r in rejects] == ["answer_not_in_response", "answer_not_in_response"]
    assert "sentences 2 to 9 of a response part with 4" in rejects[0]["detail"]
    assert [row["answer"] for row in qa] == ["(1) Yes, training takes three hours instead of five on the same hardware, see Table 3 and Figure 2."]
    assert report["rows_in"] == 3 == len(qa) + len(rejects)


def test_max_triples_caps_the_answer_list_in_the_schema_and_the_prompt(tmp_path, httpserver: HTTPServer):
    seen = []

    def recording(request):
        seen.append(request.get_json())
        return rule_based_triples(request)
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(recording)
    llm = {"backend": "openai", "model": "rules", "cache": {"path": str(tmp_path / "llm.sqlite")}, "max_attempts": 2,
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    write(tmp_path / "threads.parquet", [THREE_POINTS], "mcitebench_threads")
    qa, rejects, report = _run(tmp_path, "capped", llm, max_triples=1)
    # the server proposes three triples: over the cap of one, the answer is off-schema, retried, then a reject
    assert len(seen) == 2 and qa == []
    assert all(body["response_format"]["json_schema"]["schema"]["properties"]["triples"]["maxItems"] == 1 for body in seen)
    assert "at most 1 entries" in seen[0]["messages"][-1]["content"]
    assert [(r["id"], r["reason"]) for r in rejects] == [("t3p#0.0", "invalid_answer")] and "schema" in rejects[0]["detail"]
    assert report["rows_in"] == 1 == len(rejects)

    qa, _, _ = _run(tmp_path, "default", llm)  # the default cap (10) leaves room for all three
    assert len(qa) == 2 and "at most 10 entries" in seen[-1]["messages"][-1]["content"]


def test_embedded_model_checks_cache_and_prompt_edit(tmp_path):
    threads = [
        thread("t1", "How much does the gate contribute to accuracy? The ablation is unclear to me.",
               "Thank you. Removing the gate costs 4.1 points, as shown in Table 2 and discussed in Section 4.2, Line 39."),
        thread("t2", "Why not compare with more baselines?", "We agree and will add more baselines in the final version."),
        thread("t3", "Is the code released?", ""),
    ]
    write(tmp_path / "threads.parquet", threads, "mcitebench_threads")
    llm = {"cache": {"path": str(tmp_path / "llm.sqlite")}}
    qa, rejects, report = _run(tmp_path, "first", llm)
    by_id = {r["id"]: r["reason"] for r in rejects}
    assert by_id["t2"] == "no_explicit_reference" and by_id["t3"] == "empty_thread"
    assert report["stats"]["llm_calls"] == 1  # only the thread that cites evidence reaches the model
    assert report["rows_in"] == len(qa) + len(rejects)
    for row in qa:  # whatever the small model proposes, a kept triple passed every deterministic check
        assert row["answer"] in threads[0]["response_text"] and row["references"] and not parse_refs(row["question"])

    again, again_rejects, report = _run(tmp_path, "again", llm)
    assert (again, again_rejects) == (qa, rejects)
    assert report["stats"].get("llm_calls", 0) == 0 and report["stats"]["llm_cache_hits"] == 1

    edited = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, edited)
    path = edited / "mcitebench_explanation_qa.md"
    path.write_text(path.read_text().replace("extract valid", "carefully extract valid"))
    _, _, report = _run(tmp_path, "edited", {**llm, "prompts_dir": str(edited)})
    assert report["stats"]["llm_calls"] == 1
