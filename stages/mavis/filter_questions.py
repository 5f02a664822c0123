"""Keep the Reddit posts that make long-form visual questions, each with its best long answer.

MAVIS §3.2 Step 1: "the title must be a question starting with a question word, ending with a
question mark, and comments must be long (over 500 characters, 3+ sentences). By treating titles
as questions and comments as answers, we obtain ... VQA instances." The answer is the
highest-scored qualifying top-level comment (ties: the earlier comment, then the smaller id).
Sentences are counted with blingfire's bundled sentence model (works offline).

Input: one shard of `posts` and the same shard of `comments` (harvest_pushshift).
Output: `questions` (reddit_questions). Invariant: posts in = questions + rejected posts; comments
are read as candidates and stay in the comments table.
Reject reasons, one per rule, in this order (detail lists every rule the post fails):
title_not_question_word, title_without_question_mark, no_long_answer.
"""
from __future__ import annotations

import collections
import re

import blingfire

from stages.core.stage import Input, Output, Param, Reject, Stage

VERSION = "1"

_FIRST_WORD = re.compile(r"[A-Za-z']+")


def count_sentences(text: str) -> int:
    text = text.strip()
    if not text:
        return 0
    return len([s for s in blingfire.text_to_sentences(text).split("\n") if s.strip()])


def failed_title_rules(title: str, question_words: frozenset[str]) -> list[str]:
    failed = []
    match = _FIRST_WORD.search(title)
    if not match or match.start() > 2 or match.group(0).lower() not in question_words:
        failed.append("title_not_question_word")
    if not title.rstrip().endswith("?"):
        failed.append("title_without_question_mark")
    return failed


def best_answer(comments: list[dict], min_chars: int, min_sentences: int) -> tuple[dict, int] | None:
    qualifying = []
    for comment in comments:
        body = comment["body"].strip()
        if len(body) > min_chars:
            sentences = count_sentences(body)
            if sentences >= min_sentences:
                qualifying.append((comment, sentences))
    if not qualifying:
        return None
    return min(qualifying, key=lambda cs: (-cs[0]["score"], cs[0]["created_utc"], cs[0]["id"]))


def run(ctx):
    p = ctx.params
    question_words = frozenset(w.lower() for w in p["question_words"])
    by_post: dict[str, list[dict]] = collections.defaultdict(list)
    for comment in ctx.read_rows("comments"):
        by_post[comment["post_id"]].append(comment)
    rows = []
    for post in ctx.read_rows("posts"):
        failed = failed_title_rules(post["title"], question_words)
        answer = best_answer(by_post.get(post["id"], []), p["min_answer_chars"], p["min_answer_sentences"])
        if answer is None:
            failed.append("no_long_answer")
        with ctx.item(post["id"]):
            if failed:
                raise Reject(failed[0], f"failed: {', '.join(failed)}; title: {post['title'][:200]}")
            comment, sentences = answer
            rows.append(
                {
                    "id": post["id"],
                    "subreddit": post["subreddit"],
                    "domain": post["domain"],
                    "question": post["title"].strip(),
                    "body": post["selftext"],
                    "image_urls": post["image_urls"],
                    "answer": comment["body"].strip(),
                    "answer_id": comment["id"],
                    "answer_score": comment["score"],
                    "answer_sentences": sentences,
                    "permalink": post["permalink"],
                    "created_utc": post["created_utc"],
                    "score": post["score"],
                }
            )
    ctx.write("questions", rows)


STAGE = Stage(
    name="filter_questions",
    version=VERSION,
    doc=__doc__,
    inputs={
        "posts": Input("reddit_posts shard(s)", many=True, table="reddit_posts"),
        "comments": Input("reddit_comments shard(s) of the same posts", many=True, table="reddit_comments"),
    },
    outputs={"questions": Output("reddit_questions", "VQA instances: question title, images, best long answer")},
    params={
        "question_words": Param(list, help="a title must start with one of these (case-insensitive)", items=str),
        "min_answer_chars": Param(int, 500, "an answer must be longer than this many characters", min=0),
        "min_answer_sentences": Param(int, 3, "an answer needs at least this many sentences", min=1),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
