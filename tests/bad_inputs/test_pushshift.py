"""Bad pushshift input, one case per kind: each ends as a reject with its reason (the rest of the
dump still harvested, counts adding up) or, for a whole-file problem, as one line naming the file.
"""
from __future__ import annotations

import gzip
import json

import orjson
import pyarrow.parquet as pq
import pytest
import zstandard

from conftest import run_stage
from stages.core.stage import Context
from stages.mavis.harvest_pushshift import STAGE

DOMAINS = {"Science": ["askscience"]}
GOOD = {"id": "good", "subreddit": "askscience", "title": "Why?", "url": "https://i.redd.it/good.jpg", "created_utc": 1, "score": 5}


def _post(pid="bad", **fields):
    return {**GOOD, "id": pid, "url": f"https://i.redd.it/{pid}.jpg", **fields}


def _comment(cid="k1", **fields):
    return {"id": cid, "link_id": "t3_good", "parent_id": "t3_good", "body": "text", "score": 1, "created_utc": 2, **fields}


def _dump(path, lines, checksum=False):
    data = b"\n".join(line if isinstance(line, bytes) else orjson.dumps(line) for line in lines) + b"\n"
    path.write_bytes(zstandard.ZstdCompressor(write_checksum=checksum).compress(data))
    return path


def _harvest(tmp_path, posts, comments=()):
    """Run the stage in process on an RS dump holding GOOD then `posts` and an RC dump holding
    `comments`; returns (kept post ids, kept comment rows, rejects, report)."""
    dumps = [_dump(tmp_path / "RS_2023-01.zst", [GOOD, *posts]), _dump(tmp_path / "RC_2023-01.zst", list(comments))]
    out = tmp_path / "out"
    ctx = Context(STAGE, {"dumps": [str(d) for d in dumps]},
                  {"posts": [str(out / "posts.parquet")], "comments": [str(out / "comments.parquet")]},
                  {"domains": DOMAINS, "image_extensions": [".jpg"], "include_nsfw": False})
    report = ctx.execute()
    posts_out = [r["id"] for r in pq.read_table(out / "posts.parquet").to_pylist()]
    comments_out = pq.read_table(out / "comments.parquet").to_pylist()
    rejects = pq.read_table(out / "posts.parquet.rejects.parquet").to_pylist()
    return posts_out, comments_out, rejects, report


REJECTED_POSTS = {
    # kind: (line of the submissions dump, reason, reject id, words the detail names)
    "json_array": ([1, 2], "not_an_object", "RS_2023-01.zst:2", ["list"]),
    "json_null": (b"null", "not_an_object", "RS_2023-01.zst:2", ["NoneType"]),
    "json_string": (b'"just text"', "not_an_object", "RS_2023-01.zst:2", ["str"]),
    "broken_json": (b'{"id": "bad", "title": "unterminated', "bad_json", "RS_2023-01.zst:2", ["unexpected"]),
    "invalid_utf8": (b'{"id": "bad", "title": "caf\xe9"}', "bad_json", "RS_2023-01.zst:2", ["UTF-8"]),
    # a field the harvest does not read is skipped by the typed decode, yet its bytes still count
    "invalid_utf8_unread_field": (b'{"id": "bad", "subreddit": "askscience", "url": "https://i.redd.it/bad.jpg", "flair": "caf\xe9"}',
                                  "bad_json", "RS_2023-01.zst:2", ["UTF-8"]),
    "score_is_a_word": (_post(score="ten"), "bad_field_type", "reddit:bad", ["score", "'ten'", "str"]),
    "created_utc_is_iso": (_post(created_utc="2023-01-05T10:00:00Z"), "bad_field_type", "reddit:bad", ["created_utc", "2023-01-05"]),
    "score_past_int64": (_post(score=2**64 - 1), "bad_field_type", "reddit:bad", ["score", str(2**64 - 1)]),
    "score_is_fractional": (_post(score=4.5), "bad_field_type", "reddit:bad", ["score", "4.5", "float"]),
    "subreddit_is_a_number": (_post(subreddit=42), "bad_field_type", "reddit:bad", ["subreddit", "42", "int"]),
    "url_is_a_number": (_post(url=7), "bad_field_type", "reddit:bad", ["url", "7", "int"]),
    "url_with_a_broken_host": (_post(url="http://[broken/page"), "no_image", "reddit:bad", ["[broken"]),
    "gallery_data_is_a_list": (_post(is_gallery=True, gallery_data=[{"media_id": "a"}]), "bad_field_type", "reddit:bad", ["gallery_data", "list"]),
    "id_is_an_integer": ({**GOOD, "id": 123}, "bad_field_type", "RS_2023-01.zst:2", ["id", "123", "int"]),
    "over_18_is_text": (_post(over_18="false"), "bad_field_type", "reddit:bad", ["over_18", "'false'", "str"]),
    "is_gallery_is_text": (_post(is_gallery="true"), "bad_field_type", "reddit:bad", ["is_gallery", "'true'"]),
    "id_missing": ({k: v for k, v in GOOD.items() if k != "id"}, "missing_field", "RS_2023-01.zst:2", ["id"]),
    "duplicate_post_id": (dict(GOOD), "duplicate", "reddit:good", ["earlier"]),
}


@pytest.mark.parametrize("kind", sorted(REJECTED_POSTS))
def test_bad_submission_is_a_reject(tmp_path, kind):
    line, reason, item_id, words = REJECTED_POSTS[kind]
    posts, _, rejects, report = _harvest(tmp_path, [line])
    assert posts == ["reddit:good"]
    assert [(r["id"], r["reason"]) for r in rejects] == [(item_id, reason)]
    assert all(word in rejects[0]["detail"] for word in words), rejects[0]["detail"]
    assert report["rows_in"] == 2 == len(posts) + len(rejects)


REJECTED_COMMENTS = {
    "comment_score_is_a_word": (_comment(score="lots"), "bad_field_type", "reddit:k1", ["score", "'lots'"]),
    "comment_link_id_is_a_number": (_comment(link_id=5), "bad_field_type", "reddit:k1", ["link_id", "5"]),
    "comment_body_is_an_object": (_comment(body={"text": "x"}), "bad_field_type", "reddit:k1", ["body", "dict"]),
    "comment_id_is_an_integer": (_comment(cid=77), "bad_field_type", "RC_2023-01.zst:2", ["id", "77"]),
    "comment_is_an_array": ([_comment()], "not_an_object", "RC_2023-01.zst:2", ["list"]),
    "comment_invalid_utf8_unread_field": (orjson.dumps(_comment())[:-1] + b', "flair": "\xff"}', "bad_json", "RC_2023-01.zst:2", ["UTF-8"]),
    "two_comments_on_one_line": (orjson.dumps(_comment("k1")) + b" " + orjson.dumps(_comment("k2")), "bad_json", "RC_2023-01.zst:2",
                                 ["unexpected content after document"]),
}


@pytest.mark.parametrize("kind", sorted(REJECTED_COMMENTS))
def test_bad_comment_is_a_reject(tmp_path, kind):
    line, reason, item_id, words = REJECTED_COMMENTS[kind]
    _, comments, rejects, report = _harvest(tmp_path, [], [_comment("k0"), line])
    assert [c["id"] for c in comments] == ["reddit:k0"]
    assert [(r["id"], r["reason"]) for r in rejects] == [(item_id, reason)]
    assert all(word in rejects[0]["detail"] for word in words), rejects[0]["detail"]
    assert report["rows_in"] == 3 == 1 + len(comments) + len(rejects)


def test_blank_lines_and_a_line_of_two_comments_in_one_chunk(tmp_path):
    """A chunk of plain comments is decoded in one call only when each line is one record: blank
    and indented lines, and a line holding two comments, send it line by line, whatever mix."""
    lines = [_comment("k0"), b"", b"   ", orjson.dumps(_comment("k1")) + orjson.dumps(_comment("k2")), b"\t" + orjson.dumps(_comment("k3")),
             b"\r", _comment("k4")]
    _, comments, rejects, report = _harvest(tmp_path, [], lines)
    assert [c["id"] for c in comments] == ["reddit:k0", "reddit:k3", "reddit:k4"]
    assert [(r["id"], r["reason"]) for r in rejects] == [("RC_2023-01.zst:2", "bad_json")]
    assert report["rows_in"] == 1 + 4


def test_blank_lines_and_a_line_of_two_posts_in_one_chunk(tmp_path):
    """The same for a chunk of plain posts: decoded at once only when each line is one post."""
    lines = [_post("p0"), b"", b"   ", orjson.dumps(_post("p1")) + orjson.dumps(_post("p2")), b"\t" + orjson.dumps(_post("p3")),
             b"\r", _post("p4")]
    posts, _, rejects, report = _harvest(tmp_path, lines)
    assert posts == ["reddit:good", "reddit:p0", "reddit:p3", "reddit:p4"]
    assert [(r["id"], r["reason"]) for r in rejects] == [("RS_2023-01.zst:3", "bad_json")]
    assert report["rows_in"] == 5


def test_repeated_posts_in_one_plain_chunk(tmp_path):
    """A chunk of plain posts keeps the rule's order: a repeat of a kept post is a duplicate, a
    repeat of a rejected one is judged afresh."""
    posts, _, rejects, _ = _harvest(tmp_path, [_post("p1"), _post("p1", title="again"), _post("p2", over_18=True), _post("p2"),
                                               _post("good")])
    assert posts == ["reddit:good", "reddit:p1", "reddit:p2"]
    assert [(r["id"], r["reason"]) for r in rejects] == [("reddit:p1", "duplicate"), ("reddit:p2", "nsfw"), ("reddit:good", "duplicate")]


def test_duplicate_comment_id_is_a_reject(tmp_path):
    _, comments, rejects, _ = _harvest(tmp_path, [], [_comment("k1"), _comment("k1", body="again")])
    assert [(c["id"], c["body"]) for c in comments] == [("reddit:k1", "text")]
    assert [(r["id"], r["reason"]) for r in rejects] == [("reddit:k1", "duplicate")]


def test_a_repeat_of_a_rejected_comment_is_judged_afresh(tmp_path):
    """As for posts, only kept comments count for the duplicate rule (a monthly dump's comment ids
    are never all held): a comment first seen under a post that is not kept, or as a reply, is
    kept when it comes again as a top-level comment of a kept post; a reply given twice is
    not_top_level twice; a repeat of a kept comment, in this chunk or a later dump, is a duplicate."""
    comments = [_comment("k1", link_id="t3_gone", parent_id="t3_gone"), _comment("k1", body="again"),
                _comment("r1", parent_id="t1_k1"), _comment("r1", parent_id="t1_k1"), _comment("k1", body="a third time")]
    _, kept, rejects, report = _harvest(tmp_path, [], comments)
    assert [(c["id"], c["body"]) for c in kept] == [("reddit:k1", "again")]
    assert [(r["id"], r["reason"]) for r in rejects] == [("reddit:k1", "post_not_kept"), ("reddit:r1", "not_top_level"),
                                                         ("reddit:r1", "not_top_level"), ("reddit:k1", "duplicate")]
    assert rejects[-1]["detail"] == "comment seen before (the first is kept)"
    assert report["rows_in"] == 1 + len(comments)


def test_safe_coercions_keep_the_record(tmp_path):
    """Decimal strings and integral floats are read as the integers they spell; null is 0."""
    posts, _, rejects, _ = _harvest(tmp_path, [_post(score="12", created_utc=1672531200.0, num_comments=None)])
    assert posts == ["reddit:good", "reddit:bad"] and rejects == []
    row = pq.read_table(tmp_path / "out" / "posts.parquet").to_pylist()[1]
    assert (row["score"], row["created_utc"], row["num_comments"]) == (12, 1672531200, 0)


@pytest.mark.parametrize("name, record", [("RS_2023-01.zst", lambda i: _post(f"p{i}", title="x" * 300)),
                                          ("RC_2023-01.zst", lambda i: _comment(cid=f"c{i}") | {"body": "x" * 300})],
                         ids=["submissions", "comments"])
def test_truncated_dump_keeps_its_readable_lines(tmp_path, name, record):
    whole = zstandard.ZstdCompressor().compress(b"\n".join(orjson.dumps(record(i)) for i in range(2000)))
    path = tmp_path / name
    path.write_bytes(whole[: len(whole) // 2])
    out = tmp_path / "out"
    run_stage("harvest_pushshift", f"--input=dumps={path}", f"--output=posts={out}/p.parquet", f"--output=comments={out}/c.parquet",
              "--params", json.dumps({"domains": DOMAINS}))
    rejects = pq.read_table(out / "p.parquet.rejects.parquet").to_pylist()
    reasons = [r["reason"] for r in rejects]
    assert reasons.count("truncated_frame") == 1 and rejects[-1]["id"].startswith(f"{name}:")
    report = json.loads((out / "p.parquet.report.json").read_text())
    assert 0 < report["rows_in"] - 1 < 2000
    if name.startswith("RS"):
        assert pq.read_table(out / "p.parquet").num_rows > 0
    else:  # no post to keep them: every whole comment is a post_not_kept reject, the cut one bad_json
        assert reasons.count("bad_json") <= 1
        assert reasons.count("post_not_kept") + reasons.count("bad_json") == report["rows_in"] - 1


def _not_zstd(path):
    path.write_bytes(gzip.compress(b'{"id": "a"}\n'))


def _corrupt(path):
    _dump(path, [_post(f"p{i}", title="x" * (i % 50)) for i in range(3000)], checksum=True)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _empty(path):
    path.write_bytes(b"")


@pytest.mark.parametrize("name", ["RS_2023-01.zst", "RC_2023-01.zst"], ids=["submissions", "comments"])
@pytest.mark.parametrize("make, message", [
    (_not_zstd, "{name}: not a readable zstd file"),
    (_corrupt, "{name}: not a readable zstd file (zstd decompressor error: Data corruption detected)"),
    (_empty, "{name}: empty file, not a zstd dump"),
], ids=["not_zstd", "corrupt_zstd", "zero_bytes"])
def test_unreadable_dump_is_one_line_naming_the_file(tmp_path, make, message, name):
    """Comments are read by a process of their own: a bad comment dump is reported the same way."""
    path = tmp_path / name
    make(path)
    dumps = [path] if name.startswith("RS") else [_dump(tmp_path / "RS_2023-01.zst", [GOOD]), path]
    out = tmp_path / "out"
    result = run_stage("harvest_pushshift", *(f"--input=dumps={d}" for d in dumps), f"--output=posts={out}/p.parquet",
                       f"--output=comments={out}/c.parquet", "--params", json.dumps({"domains": DOMAINS}), check=False)
    assert result.returncode != 0
    assert message.format(name=name) in result.stderr and "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())  # nothing half-written
