"""Keep the Reddit posts that make long-form visual questions, and their long answers as instances.

MAVIS §3.2 Step 1: "the title must be a question starting with a question word, ending with a
question mark, and comments must be long (over 500 characters, 3+ sentences). By treating titles
as questions and comments as answers, we obtain ... VQA instances." Table 1 counts more answers
(157,586) than questions (81,173), so an instance is a (question, qualifying answer) pair:
`answers: all` (default) keeps every qualifying top-level comment, `answers: best` only the
highest-scored one (ties: the earlier comment, then the smaller id). Instance ids are
`<post id>/<comment id>` (reddit:abc/xyz), stable whatever the mode. Sentences are counted with
blingfire's bundled sentence model (works offline).

Input: one shard of `posts` and the same shard of `comments` (harvest_pushshift).
Outputs: `questions` (reddit_questions, one row per kept post: the images are keyed on these, so a
post's images are downloaded once however many answers it has) and `instances` (reddit_instances,
one row per kept answer, ranked within its post). Invariant (fan-out): posts in = questions +
rejected posts, and every question has 1+ instances (exactly 1 with `best`); comments are read as
candidates and stay in the comments table.
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


def qualifying_answers(comments: list[dict], min_chars: int, min_sentences: int) -> list[tuple[dict, int]]:
    """(comment, sentences) of every long answer, best first (score, then earlier, then smaller id)."""
    qualifying = []
    for comment in comments:
        body = comment["body"].strip()
        if len(body) > min_chars:
            sentences = count_sentences(body)
            if sentences >= min_sentences:
                qualifying.append((comment, sentences))
    return sorted(qualifying, key=lambda cs: (-cs[0]["score"], cs[0]["created_utc"], cs[0]["id"]))


def instance_id(post_id: str, comment_id: str) -> str:
    return f"{post_id}/{comment_id.removeprefix('reddit:')}"


def run(ctx):
    p = ctx.params
    question_words = frozenset(w.lower() for w in p["question_words"])
    by_post: dict[str, list[dict]] = collections.defaultdict(list)
    for comment in ctx.read_rows("comments"):
        by_post[comment["post_id"]].append(comment)
    questions, instances = [], []
    for post in ctx.read_rows("posts"):
        with ctx.item(post["id"]):
            failed = failed_title_rules(post["title"], question_words)
            answers = qualifying_answers(by_post.get(post["id"], []), p["min_answer_chars"], p["min_answer_sentences"])
            if not answers:
                failed.append("no_long_answer")
            if failed:
                raise Reject(failed[0], f"failed: {', '.join(failed)}; title: {post['title'][:200]}")
            if p["answers"] == "best":
                answers = answers[:1]
            question = {
                "id": post["id"],
                "subreddit": post["subreddit"],
                "domain": post["domain"],
                "question": post["title"].strip(),
                "body": post["selftext"],
                "image_urls": post["image_urls"],
                "permalink": post["permalink"],
                "created_utc": post["created_utc"],
                "score": post["score"],
            }
            questions.append({**question, "answers": len(answers)})
            for rank, (comment, sentences) in enumerate(answers, 1):
                instances.append({
                    **question,
                    "id": instance_id(post["id"], comment["id"]),
                    "post_id": post["id"],
                    "answer": comment["body"].strip(),
                    "answer_id": comment["id"],
                    "answer_score": comment["score"],
                    "answer_sentences": sentences,
                    "answer_rank": rank,
                })
    ctx.write("questions", questions)
    ctx.write("instances", instances)


def invariant(ctx) -> str | None:
    questions, instances = ctx.rows_out("questions"), ctx.rows_out("instances")
    if ctx.rows_in != questions + ctx.rejected:
        return f"posts in {ctx.rows_in} != questions {questions} + rejected {ctx.rejected}"
    if instances < questions or (ctx.params["answers"] == "best" and instances != questions):
        return f"instances {instances} do not fan out of questions {questions} (answers: {ctx.params['answers']})"
    return None


STAGE = Stage(
    name="filter_questions",
    version=VERSION,
    doc=__doc__,
    inputs={
        "posts": Input("reddit_posts shard(s)", many=True, table="reddit_posts"),
        "comments": Input("reddit_comments shard(s) of the same posts", many=True, table="reddit_comments"),
    },
    outputs={
        "questions": Output("reddit_questions", "kept posts: question title, images, number of answers kept"),
        "instances": Output("reddit_instances", "VQA instances: one per (question, qualifying answer)", counted=False),
    },
    params={
        "question_words": Param(list, help="a title must start with one of these (case-insensitive)", items=str, min=1),
        "min_answer_chars": Param(int, 500, "an answer must be longer than this many characters", min=0),
        "min_answer_sentences": Param(int, 3, "an answer needs at least this many sentences", min=1),
        "answers": Param(str, "all", "instances per question: every qualifying answer (Table 1), or the best one", choices=("all", "best")),
    },
    run=run,
    invariant=invariant,
    rejects={  # one per rule, in this order: the first the post fails (the detail lists them all)
        "title_not_question_word": "the title does not start with a question word",
        "title_without_question_mark": "the title does not end with a question mark",
        "no_long_answer": "no top-level comment is long enough (min_answer_chars, min_answer_sentences)",
    },
)

if __name__ == "__main__":
    STAGE.main()
