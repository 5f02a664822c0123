"""A local OpenAI-compatible /v1/chat/completions server on 127.0.0.1 that plays CiteEval-Auto's judge
by rule, for the CiteEval tests: it reads the sentence ids out of the rendered Table 10 / Table 11
prompt and answers in the seed's XML-tagged format.

Rules (decided from the prompt text, so every request is answered the same way each time):
- Table 10 (context): sentence i gets category 2, except a sentence containing "Hello" (1, query)
  or "In summary" (4, model knowledge).
- Table 11 (ITERCOE): a sentence citing "1, 2" gets <DELETE citation="2"> DELETE REASON 3 </DELETE>
  and rating 4; others N/A and 5.
- A query containing "MALFORMED" is always answered without any category/editing/rating tag;
  "FLAKY" is answered with a malformed rating ("five") the first time a prompt is seen, then
  correctly (the client's retry samples with another seed).
- Tags malformed for one sentence only, always (the strict parse fails, CiteEval's public parser
  loses that tag alone): "HALFCAT" writes category "5" for a sentence containing "bends" and "31"
  for one containing "wet"; "PARTIAL" writes, for every sentence after the first, the editing tag
  with a single-quoted sentence_id and the rating "5/5".
- "DOWN" is answered HTTP 400 with a body holding rating tags (a failed call: never read).
Requests are recorded (`requests`: the prompt texts). `RESPONSES` / `prepared_tables` are the
responses these rules were written for (tests/test_citeeval_context.py, test_citeeval_itercoe.py);
`REFERENCE_RESPONSES` those of tests/test_citeeval_reference.py.
"""
from __future__ import annotations

import json
import re
import threading

from local_http import LocalServer, QuietHandler

from stages.core.tables import write_table

PASSAGES = [{"id": k, "title": "", "text": f"passage {k} about light", "mode": "text"} for k in (1, 2, 3)]
RESPONSES = {  # id -> (query, statements as (sentence, citations))
    "ok": ("Why is the sky blue?", [("Hello, you asked why the sky is blue.", []), ("Air scatters blue light most.", [1, 2]),
                                    ("Shorter waves scatter more strongly.", [])]),
    "bad": ("MALFORMED question?", [("Nobody knows this for sure.", []), ("Air scatters blue light.", [3])]),
    "flaky": ("FLAKY question?", [("Air scatters blue light.", [3])]),
}
REFERENCE_RESPONSES = {
    "partial": ("PARTIAL question?", [("Air scatters blue light most.", [1, 2]), ("Shorter waves scatter more strongly.", [3])]),
    "halfcat": ("HALFCAT question?", [("Hello, you asked about light.", []), ("Light bends in water.", []),
                                      ("Water is also wet, as was said.", [])]),
    "down": ("DOWN question?", [("Air scatters blue light.", [1]), ("Nobody measured it.", [])]),
}


def prepared_tables(tmp_path, responses: dict = RESPONSES) -> list[str]:
    """citeeval_prepare's two tables for `responses`, written under tmp_path; the stage flags reading them."""
    prepared, statements = [], []
    for rid, (query, rows) in responses.items():
        prepared.append({"id": rid, "model": "m", "source": "test", "query": query, "passages": PASSAGES, "mode": "text",
                         "prediction": " ".join(s for s, _ in rows), "thinking_dropped": False, "unanswerable": False,
                         "n_statements": len(rows), "dropped_citations": [], "empty": not rows, "thinking_unclosed": False,
                         "no_answer_reference": False})
        statements += [{"id": f"{rid}/{i}", "response_id": rid, "model": "m", "sentence_id": i, "sentence": s, "citations": c,
                        "dropped": [], "unanswerable": False} for i, (s, c) in enumerate(rows, start=1)]
    write_table(tmp_path / "prepared.parquet", prepared, "citeeval_prepared")
    write_table(tmp_path / "statements.parquet", statements, "citeeval_statements")
    return ["--input", f"responses={tmp_path / 'prepared.parquet'}", "--input", f"statements={tmp_path / 'statements.parquet'}"]


def context_answer(prompt: str) -> str:
    block = prompt.split("<response>", 1)[1]
    out = []
    for sid, text in re.findall(r'<sentence sentence_id="(\d+)">(.*?)</sentence>', block):
        category = 1 if "Hello" in text else 4 if "In summary" in text else 2
        if "HALFCAT" in prompt.split("</query>", 1)[0]:
            category = "5" if "bends" in text else "31" if "wet" in text else category
        out.append(f"<thinking> sentence {sid} </thinking>\n<category sentence_id=\"{sid}\"> {category} </category>")
    return "\n".join(out)


def itercoe_answer(prompt: str, broken: bool, partial: bool = False) -> str:
    block = prompt.split("<citations>", 1)[1]
    out = []
    for n, (sid, cites) in enumerate(re.findall(r'<citation sentence_id="(\d+)" sentence="[^"]*">\s*(.*?)\s*</citation>', block)):
        if cites == "1, 2":
            edits, rating = '<DELETE citation="2"> DELETE REASON 3 </DELETE>', 4
        elif partial:
            edits, rating = '<DELETE citation="3"> DELETE REASON 1 </DELETE>', 2
        else:
            edits, rating = "N/A", 5
        quote = "'" if partial and n else '"'
        shown = "five" if broken else "5/5" if partial and n else rating
        out.append(f"<thinking> sentence {sid} </thinking>\n<editing sentence_id={quote}{sid}{quote}> {edits} </editing>\n"
                   f"<rating sentence_id=\"{sid}\"> {shown} </rating>")
    return "\n".join(out)


class RuleJudge:
    def __init__(self):
        self.requests: list[str] = []
        self.seen: set[str] = set()
        self.lock = threading.Lock()
        judge = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = body["messages"][-1]["content"]
                with judge.lock:
                    judge.requests.append(prompt)
                    first = prompt not in judge.seen
                    judge.seen.add(prompt)
                query = prompt.split("<query>", 1)[1].split("</query>", 1)[0]
                if "DOWN" in query:
                    self.answer(400, b'{"error": {"message": "<rating sentence_id=\\"1\\"> 5 </rating>"}}')
                    return
                if "MALFORMED" in query:
                    text = "<thinking> I am not sure. </thinking> The citations look fine."
                elif "<categories>" in prompt:
                    text = context_answer(prompt)
                else:
                    text = itercoe_answer(prompt, broken="FLAKY" in query and first, partial="PARTIAL" in query)
                self.answer(200, json.dumps({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                                             "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4}}).encode())

        self.server = LocalServer(Handler)
        self.url = f"{self.server.url}/v1"

    def llm(self, tmp_path) -> dict:
        """llm settings that send the judge's calls here, with a per-test cache."""
        return {"backend": "openai", "model": "rule-judge", "cache": {"path": str(tmp_path / "llm.sqlite")},
                "openai": {"base_url": self.url, "max_in_flight": 2, "logprobs": False}}

    def close(self):
        self.server.close()
