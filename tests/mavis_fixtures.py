"""MAVIS test rows and a rule-answering OpenAI-compatible chat endpoint for the MAVIS prompts."""
from __future__ import annotations

import json
import re

from werkzeug import Response

from stages.core.tables import write_table


def instance(post, comment, answer, question="Why is the sky in my photo so red?", body=""):
    return {"id": f"reddit:{post}/{comment}", "post_id": f"reddit:{post}", "subreddit": "askscience", "domain": "Science",
            "question": question, "body": body, "image_urls": ["https://i.redd.it/x.jpg"], "answer": answer,
            "answer_id": f"reddit:{comment}", "answer_score": 1, "answer_sentences": 3, "answer_rank": 1, "permalink": "",
            "created_utc": 1, "score": 1}


def write_instances(path, rows):
    write_table(path, rows, "reddit_instances")
    return path


def _reply(content: str) -> Response:
    body = {"id": "c1", "object": "chat.completion", "model": "rule",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10}}
    return Response(json.dumps(body), content_type="application/json")


def prompt_text(request) -> str:
    content = request.get_json()["messages"][-1]["content"]
    return content if isinstance(content, str) else " ".join(part.get("text", "") for part in content)


def answer_by_rule(request):
    """Table 9: the sentence's clauses split at ' and ' are the subclaims; a sentence with 'garbage'
    gets non-JSON. Table 10: a fact naming 'cat' is irrelevant, one naming 'I took' is provided by
    the asker, others are relevant and verifiable. Table 7: a question naming 'capital' is answered
    'Paris', others 'no idea'. Table 8: a response 'Paris' is right (yes), others wrong (no)."""
    text = prompt_text(request)
    if "subclaims" in text:
        sentence = text.rsplit("Sentence:", 1)[1].strip()
        if "garbage" in sentence:
            return _reply("these are not subclaims")
        return _reply(json.dumps({"subclaims": [c.strip().rstrip(".") + "." for c in sentence.split(" and ")]}))
    if '"relevance"' in text:
        fact = text.rsplit("Fact:", 1)[1].strip()
        if re.search(r"\bcat\b", fact):
            return _reply(json.dumps({"relevance": "Irrelevant", "source": None}))
        if "I took" in fact:
            return _reply(json.dumps({"relevance": "Relevant", "source": "Provided"}))
        return _reply(json.dumps({"relevance": "Relevant", "source": "Verifiable"}))
    if "Model response:" in text:
        response = text.rsplit("Model response:", 1)[1].split("\n")[0].strip()
        return _reply("yes" if response.startswith("Paris") else "no")
    question = re.search(r"Question: (.*)", text).group(1)
    return _reply("Paris" if "capital" in question else "no idea")
