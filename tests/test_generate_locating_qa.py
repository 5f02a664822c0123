"""generate_locating_qa: candidate choice (no model), a real run with the embedded model, and the
kept-question path through an OpenAI-compatible server on 127.0.0.1."""
import json
import re

import pyarrow.parquet as pq

from pytest_httpserver import HTTPServer
from werkzeug import Response

from stages.core.images import ImageStore
from stages.core.refs import parse_refs
from stages.mcitebench.generate_locating_qa import choose, eligible
from tests.conftest import run_stage
from tests.mcitebench_fixtures import PAPER, element, paper_elements, write

def test_candidates_and_balanced_choice(tmp_path):
    elements = paper_elements(ImageStore(tmp_path / "images"))
    elements.append(element(PAPER, 20, "text", "A paragraph without any measurable statement, long enough to qualify otherwise " * 2, section="2"))
    elements.append(element(PAPER, 21, "figure", "Figure A1: appendix-numbered figure.", label="Figure A1", section="4", image="ab" * 32))
    ok = {e["id"] for e in elements if eligible(e, 60)}
    assert f"el:{PAPER}:0:20" not in ok  # no number in it
    assert f"el:{PAPER}:0:21" not in ok  # lettered label: appendix material
    assert f"el:{PAPER}:5:10" not in ok and f"el:{PAPER}:5:11" not in ok  # appendix
    assert {f"el:{PAPER}:2:5", f"el:{PAPER}:3:6", f"el:{PAPER}:1:1"} <= ok
    pool = [e for e in elements if e["id"] in ok]
    three = choose(pool, 3, 0, PAPER)
    assert sorted(e["modality"] for e in three) == ["figure", "table", "text"]
    assert [e["id"] for e in choose(list(reversed(pool)), 3, 0, PAPER)] == [e["id"] for e in three]


def test_generates_with_the_embedded_model(tmp_path):
    store = ImageStore(tmp_path / "images")
    el = write(tmp_path / "elements.parquet", paper_elements(store), "mcitebench_elements")
    params = {"llm": {"cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root)},
              "per_paper": 2, "min_text_chars": 60, "seed": 1}
    run_stage("generate_locating_qa", "--input", f"elements={el}", "--output", f"qa={tmp_path}/qa.parquet", "--params", json.dumps(params))
    qa = pq.read_table(tmp_path / "qa.parquet").to_pylist()
    rejects = pq.read_table(tmp_path / "qa.parquet.rejects.parquet").to_pylist()
    report = json.loads((tmp_path / "qa.parquet.report.json").read_text())
    assert report["rows_in"] == 2 == len(qa) + len(rejects)
    assert report["stats"]["llm_calls"] == 2 and report["stats"]["elements_read"] == 12
    # greedy decoding is deterministic: the embedded model repeats one option for both chosen elements
    # (the kept-question path is exercised by the next test)
    assert qa == [] and [r["reason"] for r in rejects] == ["duplicate_options", "duplicate_options"]
    assert all(r["detail"].startswith("options [") for r in rejects)


def answer_from_content(request):
    """An OpenAI-compatible chat completion asking for the first number of the element's content."""
    prompt = request.get_json()["messages"][-1]["content"]
    prompt = prompt if isinstance(prompt, str) else " ".join(part.get("text", "") for part in prompt)
    content = prompt.split("# Content", 1)[1].split("# JSON Output Format", 1)[0]
    number = re.search(r"\d+(?:\.\d+)?", content.split("\n", 1)[1]).group()
    answer = {"Refusal": False, "Question": "Which value does the passage report?", "A": f"{number} (a)", "B": "0.5",
              "C": "7777", "D": "none of these", "Gold": "A", "Explanation": f"The passage states {number}."}
    body = {"id": "c1", "object": "chat.completion", "model": "smollm2",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": json.dumps(answer)}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def test_kept_questions_from_an_openai_compatible_server(tmp_path, httpserver: HTTPServer):
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(answer_from_content)
    store = ImageStore(tmp_path / "images")
    elements = paper_elements(store)
    el = write(tmp_path / "elements.parquet", elements, "mcitebench_elements")
    llm = {"backend": "openai", "model": "smollm2", "cache": {"path": str(tmp_path / "llm.sqlite")}, "image_store": str(store.root),
           "openai": {"base_url": httpserver.url_for("/v1"), "max_retries": 1}}
    params = {"llm": llm, "per_paper": 3, "min_text_chars": 60, "seed": 1}
    run_stage("generate_locating_qa", "--input", f"elements={el}", "--output", f"qa={tmp_path}/qa.parquet", "--params", json.dumps(params))
    qa = pq.read_table(tmp_path / "qa.parquet").to_pylist()
    report = json.loads((tmp_path / "qa.parquet.report.json").read_text())
    assert report["rows_in"] == 3 == len(qa) and report["rejected"] == 0 and report["stats"]["llm_calls"] == 3
    by_id = {e["id"]: e for e in elements}
    assert sorted(by_id[row["source_id"]]["modality"] for row in qa) == ["figure", "table", "text"]
    for row in qa:
        assert row["question_type"] == "locating" and row["evidence_element_ids"] == [row["source_id"]]
        assert row["options"][1:] == ["0.5", "7777", "none of these"] and row["gold"] == "A"
        assert row["answer"] == row["options"][0] and row["answer"].split()[0] in (by_id[row["source_id"]]["text"] or "")
        assert row["explanation"].startswith("The passage states") and not parse_refs(row["question"])
