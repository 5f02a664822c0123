"""filter_questions: MAVIS Step 1 rules, one reject reason per rule, best answer choice."""
from __future__ import annotations

import json

import pyarrow.parquet as pq

from conftest import run_stage
from stages.core.tables import write_table
from stages.mavis.filter_questions import count_sentences

LONG = ("This is a long answer sentence that explains the picture in some detail. " * 3).strip()
LONG = " ".join([LONG] * 3)  # > 500 chars, 9 sentences


def _post(pid, title):
    return {"id": pid, "post_id": pid[7:], "subreddit": "askscience", "domain": "Science", "title": title, "selftext": "",
            "url": "u", "image_urls": ["https://i.redd.it/x.jpg"], "is_gallery": False, "author": "a", "created_utc": 1,
            "score": 3, "num_comments": 1, "over_18": False, "permalink": "/r/x"}


def _comment(cid, pid, body, score, created=5):
    return {"id": cid, "post_id": pid, "body": body, "score": score, "author": "b", "created_utc": created}


def _run(tmp_path, params):
    run_stage("filter_questions", f"--input=posts={tmp_path / 'posts.parquet'}", f"--input=comments={tmp_path / 'comments.parquet'}",
              f"--output=questions={tmp_path / 'q.parquet'}", f"--output=instances={tmp_path / 'i.parquet'}", "--params", json.dumps(params))


def test_every_qualifying_answer_is_an_instance(tmp_path):
    """answers: all (the default, Table 1): one instance per long answer, ids stable across modes;
    the images stay keyed on the one question row per post."""
    posts = [_post("reddit:p1", "Why is it red?"), _post("reddit:p2", "What is this?"), _post("reddit:p3", "Look")]
    comments = [
        _comment("reddit:a", "reddit:p1", LONG, 5),
        _comment("reddit:b", "reddit:p1", LONG + " More.", 9),
        _comment("reddit:c", "reddit:p1", "Too short.", 99),
        _comment("reddit:d", "reddit:p2", LONG, 1),
        _comment("reddit:e", "reddit:p3", LONG, 1),
    ]
    write_table(tmp_path / "posts.parquet", posts, "reddit_posts")
    write_table(tmp_path / "comments.parquet", comments, "reddit_comments")
    _run(tmp_path, {"question_words": ["why", "what"]})
    questions = {q["id"]: q["answers"] for q in pq.read_table(tmp_path / "q.parquet").to_pylist()}
    assert questions == {"reddit:p1": 2, "reddit:p2": 1}
    instances = [(i["id"], i["answer_rank"]) for i in pq.read_table(tmp_path / "i.parquet").to_pylist()]
    assert instances == [("reddit:p1/b", 1), ("reddit:p1/a", 2), ("reddit:p2/d", 1)]
    report = json.loads((tmp_path / "q.parquet.report.json").read_text())
    assert report["rows_in"] == 3 == report["rows_out"]["questions"] + report["rejected"]
    assert report["rows_out"]["instances"] == 3
    _run(tmp_path, {"question_words": ["why", "what"], "answers": "best"})
    best = [i["id"] for i in pq.read_table(tmp_path / "i.parquet").to_pylist()]
    assert best == ["reddit:p1/b", "reddit:p2/d"]  # the same ids as in `all` mode


def test_rules_and_best_answer(tmp_path):
    posts = [
        _post("reddit:ok", "Why is the sky blue in this photo?"),
        _post("reddit:noqw", "Sky blue in this photo?"),
        _post("reddit:nomark", "Why is the sky blue"),
        _post("reddit:short", "What is this?"),
        _post("reddit:both", "Look at this"),
    ]
    one_sentence = "word " * 120  # long but a single sentence
    comments = [
        _comment("reddit:c1", "reddit:ok", LONG, 10),
        _comment("reddit:c2", "reddit:ok", LONG + " Extra.", 50),
        _comment("reddit:c3", "reddit:ok", "Short. But. Many.", 999),
        _comment("reddit:c4", "reddit:short", one_sentence, 5),
        _comment("reddit:c5", "reddit:noqw", LONG, 1),
        _comment("reddit:c6", "reddit:nomark", LONG, 1),
    ]
    write_table(tmp_path / "posts.parquet", posts, "reddit_posts")
    write_table(tmp_path / "comments.parquet", comments, "reddit_comments")
    out = tmp_path / "q.parquet"
    params = {"question_words": ["why", "what", "how"], "min_answer_chars": 500, "min_answer_sentences": 3, "answers": "best"}
    _run(tmp_path, params)
    questions = pq.read_table(out).to_pylist()
    assert [(q["id"], q["answers"]) for q in questions] == [("reddit:ok", 1)]
    instances = pq.read_table(tmp_path / "i.parquet").to_pylist()
    assert [(i["id"], i["post_id"], i["answer_id"], i["answer_score"], i["answer_rank"]) for i in instances] == [
        ("reddit:ok/c2", "reddit:ok", "reddit:c2", 50, 1)]
    rejects = {r["id"]: r for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert {k: v["reason"] for k, v in rejects.items()} == {
        "reddit:noqw": "title_not_question_word",
        "reddit:nomark": "title_without_question_mark",
        "reddit:short": "no_long_answer",
        "reddit:both": "title_not_question_word",
    }
    assert "title_without_question_mark" in rejects["reddit:both"]["detail"] and "no_long_answer" in rejects["reddit:both"]["detail"]
    report = json.loads(open(f"{out}.report.json").read())
    assert report["rows_in"] == 5 == report["rows_out"]["questions"] + report["rejected"]


def test_sentence_counter_offline():
    assert count_sentences("One thing. Another thing! A third? ") == 3
    assert count_sentences("") == 0
