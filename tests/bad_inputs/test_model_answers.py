"""Bad model answers (issue 32: every HTTP answer is untrusted input), from a local server on
127.0.0.1 that speaks the chat-completions shape. Through a model stage's real CLI
(filter_queries): each crafted answer is a reject of its own query naming what was wrong (or, where
the shape is legal, a kept query), the stage exits 0 and counts every row. Through the client: a
log-probability entry without its number, and an answer over `max_answer_chars` (retried, never
cached, not ok)."""
from __future__ import annotations

import collections
import json
import re

import pyarrow.parquet as pq

from tests.conftest import run_stage
from tests.faulty_server import FaultyServer
from stages.core.llm import LLMClient, LLMRequest
from stages.core.prompts import PromptLibrary
from stages.core.tables import write_table

GOOD = json.dumps({"analysis": "A clear question that needs references.", "label": 1})
USAGE = {"prompt_tokens": 30, "completion_tokens": 12}


def completion(content, **fields) -> dict:
    return {"id": "c", "object": "chat.completion", "model": "m", "usage": USAGE,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}], **fields}


CASES = {  # case -> (the answer body to the query naming it, None = kept, or what its reject detail says)
    "content_as_parts": (completion([{"type": "text", "text": GOOD[:12]}, {"type": "image_url", "image_url": {"url": "x"}},
                                     {"type": "text", "text": GOOD[12:]}]), None),
    "content_parts_not_objects": (completion([GOOD]), "message.content[0] is of type str, not a part"),
    "content_a_number": (completion(7), "message.content is of type int"),
    "usage_counts_as_strings": ({**completion(GOOD), "usage": {"prompt_tokens": "30", "completion_tokens": "12"}}, None),
    "usage_count_not_a_number": ({**completion(GOOD), "usage": {"prompt_tokens": "thirty"}}, "usage.prompt_tokens is 'thirty', not a token count"),
    "usage_not_an_object": ({**completion(GOOD), "usage": [30]}, "usage is of type list"),
    "choices_missing": ({"id": "c", "object": "chat.completion"}, "no choices"),
    "choices_empty": ({"id": "c", "choices": []}, "no choices"),
    "choices_not_a_list": ({"id": "c", "choices": "none"}, "choices is of type str"),
    "choice_without_message": ({"id": "c", "choices": [{"text": GOOD}]}, "choices[0] has no message"),
    "finish_reason_an_object": ({"id": "c", "choices": [{"message": {"content": GOOD}, "finish_reason": {"why": "stop"}}]},
                                "finish_reason is {'why': 'stop'}"),
    "answer_not_an_object": (["choices"], "the answer is of type list, not an object"),
    "answer_not_json": (b"<html>502 Bad Gateway</html>", "malformed response"),
    "answer_of_20_MB": (completion("x" * 20_000_000), "is too large"),
}


def crafted(method, target, headers, body):
    request = json.loads(body)
    text = request["messages"][-1]["content"]
    case = re.search(r"case (\w+)", text)
    answer = CASES[case.group(1)][0] if case and "# Input Text" in text else completion(GOOD)  # step 1 (figure 5) only
    data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
    return 200, {"Content-Type": "application/json"}, data


def test_each_bad_answer_is_a_reject_of_its_query_with_the_reason(tmp_path):
    queries = tmp_path / "queries.parquet"
    write_table(queries, [{"id": f"eli5:{case}", "question": f"Why does case {case} happen?", "body": "", "subreddit": "explainlikeimfive",
                           "answers": ["An answer."], "source": "json:train"} for case in CASES], "m2rag_queries")
    out = tmp_path / "out" / "filtered.parquet"
    with FaultyServer({"/v1/chat/completions": crafted}) as server:
        llm = {"backend": "openai", "model": "m", "cache": {"path": str(tmp_path / "llm.sqlite")},
               "openai": {"base_url": server.url("/v1"), "max_retries": 1, "response_format": "none"}}
        result = run_stage("filter_queries", "--input", f"queries={queries}", "--output", f"filtered_queries={out}",
                           "--params", json.dumps({"apply": False, "llm": llm}))
    assert "Traceback" not in result.stderr
    kept = {row["id"] for row in pq.read_table(out).to_pylist()}
    rejects = {row["id"]: (row["reason"], row["detail"]) for row in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    report = json.loads(out.with_name(out.name + ".report.json").read_text())
    assert report["rows_in"] == len(CASES) == len(kept) + len(rejects) == report["rows_out"]["filtered_queries"] + report["rejected"]
    for case, (_, expected) in CASES.items():
        if expected is None:
            assert f"eli5:{case}" in kept, case
        else:
            reason, detail = rejects[f"eli5:{case}"]
            assert reason == "invalid_answer" and detail.startswith("m2rag_query_clear: backend: ") and expected in detail, (case, detail)
            assert len(detail) < 3000  # a 20 MB answer is not copied into the rejects
    # the legal shapes were read: two string counts and the parts' text made valid answers
    assert report["stats"]["llm_prompt_tokens"] >= 30 * 2 * 2


def client(url, tmp_path, **settings) -> LLMClient:
    folder = tmp_path / "prompts"
    folder.mkdir(exist_ok=True)
    (folder / "yn.md").write_text("---\nkind: yesno\nmax_tokens: 2\n---\nAnswer yes or no. {{ question }}\n")
    (folder / "say.md").write_text("---\nkind: text\nmax_tokens: 60\n---\nSay something about {{ topic }}.\n")
    c = LLMClient.from_params({"backend": "openai", "model": "m", "cache": {"path": str(tmp_path / "llm.sqlite")},
                               "openai": {"base_url": url, "max_retries": 1}, **settings}, stats=collections.Counter())
    c.prompts = PromptLibrary(folder)
    return c


def test_a_logprob_entry_without_its_number_is_a_reject_with_the_reason(tmp_path):
    def answer(method, target, headers, body):
        top = [{"token": "yes", "logprob": -0.2}, {"token": "no"}]
        data = completion("yes", choices=[{"message": {"content": "yes"}, "logprobs": {"content": [{"token": "yes", "logprob": -0.2,
                                                                                                      "top_logprobs": top}]}}])
        return 200, {"Content-Type": "application/json"}, json.dumps(data).encode()

    with FaultyServer({"/v1/chat/completions": answer}) as server, client(server.url("/v1"), tmp_path) as c:
        (verdict,) = c.run([LLMRequest("q", "yn", {"question": "Is water wet?"})])
    assert not verdict.ok and verdict.p_yes is None
    assert verdict.error == f"backend: malformed response from {server.url('/v1/chat/completions')}: " \
                            "logprobs.content[0].top_logprobs[1] has no log-probability (logprob None)"


def test_an_answer_over_max_answer_chars_is_retried_then_not_ok_and_never_cached(tmp_path):
    sent = []

    def answer(method, target, headers, body):
        sent.append(json.loads(body)["seed"])
        return 200, {"Content-Type": "application/json"}, json.dumps(completion("na " * 40)).encode()

    with FaultyServer({"/v1/chat/completions": answer}) as server:
        with client(server.url("/v1"), tmp_path, max_answer_chars=50, max_attempts=2) as c:
            (long,) = c.run([LLMRequest("a", "say", {"topic": "the sea"})])
        with client(server.url("/v1"), tmp_path, max_answer_chars=50, max_attempts=2) as c:
            (again,) = c.run([LLMRequest("a", "say", {"topic": "the sea"})])
    assert not long.ok and long.attempts == 2 and long.error == "too_long: the answer has 120 characters, over llm.max_answer_chars (50)"
    assert len(long.raw) == 50 and sent[:2] == [0, 1]
    assert not again.cached and len(sent) == 4  # nothing was stored
