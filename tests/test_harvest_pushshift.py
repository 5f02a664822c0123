"""harvest_pushshift on tiny hand-made dumps: image rules, galleries, comment joins, sharding,
bad lines and truncated files."""
from __future__ import annotations

import json
import os

import msgspec
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
import zstandard

from conftest import REPO, run_stage, demo_config
from stages.mavis import harvest_pushshift
from stages.mavis.harvest_pushshift import TruncatedFrame, image_urls, read_zstd_lines
from stages.mavis.reddit_records import GALLERY_ITEM_REASONS, PlainPost, plain_gallery_urls

DOMAINS = {"Science": ["askscience"], "Art & Design": ["woodworking"]}


def _zst(path, records, extra_lines=()):
    lines = [orjson.dumps(r) for r in records] + list(extra_lines)
    path.write_bytes(zstandard.ZstdCompressor().compress(b"\n".join(lines) + b"\n"))
    return path


def _post(pid, sub="askscience", **kw):
    return {"id": pid, "subreddit": sub, "title": "Why?", "url": f"https://i.redd.it/{pid}.jpg", "created_utc": 1, "score": 5, **kw}


def _comment(cid, pid, parent=None, score=1):
    return {"id": cid, "link_id": f"t3_{pid}", "parent_id": parent or f"t3_{pid}", "body": "text", "score": score, "created_utc": 2}


def _harvest(tmp_path, dumps, shards=2):
    out = tmp_path / "out"
    args = [f"--input=dumps={d}" for d in dumps]
    args += [f"--output=posts={out}/posts.{i:05d}.parquet" for i in range(shards)]
    args += [f"--output=comments={out}/comments.{i:05d}.parquet" for i in range(shards)]
    run_stage("harvest_pushshift", *args, "--params", json.dumps({"domains": DOMAINS}))
    posts = [r for i in range(shards) for r in pq.read_table(out / f"posts.{i:05d}.parquet").to_pylist()]
    comments = [r for i in range(shards) for r in pq.read_table(out / f"comments.{i:05d}.parquet").to_pylist()]
    rejects = pq.read_table(out / "posts.00000.parquet.rejects.parquet").to_pylist()
    report = json.loads((out / "posts.00000.parquet.report.json").read_text())
    return posts, comments, rejects, report


def test_gallery_order_unescaping_and_failed_items():
    post = {
        "is_gallery": True,
        "gallery_data": {"items": [{"media_id": "b"}, {"media_id": "a"}, {"media_id": "c"}]},
        "media_metadata": {
            "a": {"status": "valid", "s": {"u": "https://preview.redd.it/a.png?width=10&amp;s=1"}},
            "b": {"status": "valid", "s": {"u": "https://preview.redd.it/b.png?width=10&amp;s=2"}},
            "c": {"status": "failed"},
        },
    }
    assert image_urls(post, (".jpg",)) == (["https://preview.redd.it/b.png?width=10&s=2", "https://preview.redd.it/a.png?width=10&s=1"], None)
    post["media_metadata"]["a"]["status"] = post["media_metadata"]["b"]["status"] = "failed"
    assert image_urls(post, (".jpg",)) == ([], "gallery_without_valid_images")
    assert image_urls({"url": "https://i.redd.it/x"}, (".jpg",)) == (["https://i.redd.it/x"], None)
    assert image_urls({"url": "https://imgur.com/y.PNG"}, (".png",)) == (["https://imgur.com/y.PNG"], None)
    assert image_urls({"url": "https://example.com/article"}, (".png",)) == ([], "no_image")


GALLERY_ITEMS = {  # media_metadata entries of a gallery's items, and the item list
    "valid": ({"status": "valid", "s": {"u": "https://preview.redd.it/v.png?a=1&amp;b=2"}}, {"media_id": "valid"}),
    "gif": ({"status": "valid", "s": {"u": None, "gif": "https://preview.redd.it/g.gif"}}, {"media_id": "gif"}),
    "failed": ({"status": "failed", "s": {"u": "https://preview.redd.it/f.png"}}, {"media_id": "failed"}),
    "unprocessed": ({"status": "unprocessed"}, {"media_id": "unprocessed"}),
    "no_url": ({"status": "valid", "s": {}}, {"media_id": "no_url"}),
    "no_meta": (None, {"media_id": "no_meta"}),
    "no_id": (None, {"id": 3}),
}


def _gallery(pid, names, sub="askscience"):
    return _post(pid, sub=sub, is_gallery=True, url=f"https://www.reddit.com/gallery/{pid}",
                 gallery_data={"items": [GALLERY_ITEMS[n][1] for n in names]},
                 media_metadata={n: GALLERY_ITEMS[n][0] for n in names if GALLERY_ITEMS[n][0] is not None})


@pytest.mark.parametrize("names", [list(GALLERY_ITEMS), ["failed", "no_meta"], ["no_id", "valid"], []])
def test_plain_gallery_reads_as_the_checked_gallery(names):
    """A gallery decoded as a plain post gives the checked path's urls and dropped items."""
    post = _gallery("g", names)
    dropped, plain_dropped = [], []
    urls, _ = image_urls(post, (".jpg",), dropped)
    assert plain_gallery_urls(msgspec.json.decode(orjson.dumps(post), type=PlainPost), plain_dropped) == urls
    assert plain_dropped == dropped
    assert len(dropped) == sum(n not in ("valid", "gif") for n in names)


def test_dropped_gallery_items_are_rejects_of_a_kept_post(tmp_path):
    """Each gallery item left out of a kept post is a reject `reddit:<post>:<media>`; a gallery
    post that is not kept gives none. Parsed posts (a coerced score) report them the same way."""
    names = list(GALLERY_ITEMS)
    rs = _zst(tmp_path / "RS_2023-01.zst", [_gallery("g1", names), _gallery("g2", names, sub="pics"), {**_gallery("g3", names), "score": "7"}])
    posts, _, rejects, report = _harvest(tmp_path, [rs])
    assert sorted(p["id"] for p in posts) == ["reddit:g1", "reddit:g3"]
    items = {(r["id"], r["reason"]) for r in rejects if r["reason"] in GALLERY_ITEM_REASONS}
    expected = {("failed", "gallery_item_failed"), ("unprocessed", "gallery_item_failed"), ("no_url", "gallery_item_no_metadata"),
                ("no_meta", "gallery_item_no_metadata"), ("item6", "gallery_item_no_metadata")}
    assert items == {(f"reddit:{pid}:{media}", reason) for pid in ("g1", "g3") for media, reason in expected}
    assert [r["reason"] for r in rejects if r["reason"] not in GALLERY_ITEM_REASONS] == ["subreddit_not_configured"]
    assert report["rows_in"] == 3 == len(posts) + len(rejects) - len(items)
    assert report["stats"]["gallery_items_dropped"] == len(items) == 10


def test_harvest_keeps_image_posts_and_top_level_comments(tmp_path):
    rs = _zst(tmp_path / "RS_2023-01.zst", [
        _post("a"), _post("b", sub="woodworking"), _post("c", sub="pics"), _post("d", over_18=True),
        _post("e", url="https://example.com/x"), _post("a"),
    ], extra_lines=[b'{"id": "oops"', b"[1, 2]"])
    rc = _zst(tmp_path / "RC_2023-01.zst", [
        _comment("k1", "a"), _comment("k2", "a", parent="t1_k1"), _comment("k3", "c"), _comment("k4", "b"), _comment("k1", "a"),
    ])
    # comments first on the command line: submissions are still read first
    posts, comments, rejects, report = _harvest(tmp_path, [rc, rs])
    assert sorted(p["id"] for p in posts) == ["reddit:a", "reddit:b"]
    assert {p["id"]: p["domain"] for p in posts} == {"reddit:a": "Science", "reddit:b": "Art & Design"}
    assert sorted(c["id"] for c in comments) == ["reddit:k1", "reddit:k4"]
    reasons = sorted(r["reason"] for r in rejects)
    assert reasons == sorted(["subreddit_not_configured", "nsfw", "no_image", "duplicate", "bad_json", "not_an_object",
                              "not_top_level", "post_not_kept", "duplicate"])
    assert report["rows_in"] == 8 + 5 == len(posts) + len(comments) + len(rejects)
    assert report["rejected_by_reason"]["duplicate"] == 2


def test_comment_verdicts_keep_reading_order(tmp_path):
    """Comments are judged in a reader process and joined to the kept posts here: the rejects of
    both steps (not_top_level there, post_not_kept here) come out in line order, across chunks."""
    rs = _zst(tmp_path / "RS_2023-01.zst", [_post("a"), _post("b")])
    comments, expected = [], []
    for i in range(6000):  # several of the reader's chunks
        kind = i % 5
        if kind == 0:
            comments.append(_comment(f"k{i}", "a"))
        elif kind == 1:
            comments.append(_comment(f"t{i}", "a", parent=f"t1_k{i - 1}"))
            expected.append((f"reddit:t{i}", "not_top_level"))
        elif kind == 2:
            comments.append(_comment(f"o{i}", "gone"))
            expected.append((f"reddit:o{i}", "post_not_kept"))
        elif kind == 3:
            comments.append(_comment(f"k{i - 3}", "b"))  # the id of the comment 3 lines up
            expected.append((f"reddit:k{i - 3}", "duplicate"))
        else:
            comments.append(_comment(f"b{i}", "b", score="many"))
            expected.append((f"reddit:b{i}", "bad_field_type"))
    lines = [orjson.dumps({**c, "body": os.urandom(200).hex()}) for c in comments]  # incompressible: over 1 MB of zstd
    data = b"\n".join(lines) + b"\n"
    c = zstandard.ZstdCompressor()
    (tmp_path / "RC_2023-01.zst").write_bytes(c.compress(data[: len(data) // 2]) + c.compress(data[len(data) // 2 :]))
    posts, kept, rejects, report = _harvest(tmp_path, [tmp_path / "RC_2023-01.zst", rs])
    assert [(r["id"], r["reason"]) for r in rejects] == expected
    assert [k["id"] for k in kept if k["post_id"] == "reddit:a"] == [f"reddit:k{i}" for i in range(0, 6000, 5)]
    assert report["rows_in"] == 2 + 6000 == len(posts) + len(kept) + len(rejects)


@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["over_budget", "within_budget"])
def test_comment_reader_holds_its_verdicts_until_the_posts_are_known(tmp_path, monkeypatch, budget):
    """The reader judges ahead while the posts are read, polling for the kept posts; past
    PENDING_TEXT of held text it waits for them. Either way every comment is joined to them."""
    monkeypatch.setattr(harvest_pushshift, "PENDING_TEXT", budget)
    c = zstandard.ZstdCompressor()
    first = b"\n".join(orjson.dumps({**_comment(f"k{i}", "a"), "body": os.urandom(600).hex()}) for i in range(500)) + b"\n"
    path = tmp_path / "RC_2023-01.zst"
    path.write_bytes(c.compress(first) + c.compress(orjson.dumps(_comment("late", "gone")) + b"\n"))
    asked = []

    def receive(block):
        asked.append(block)
        return {"a": 1} if block else None

    messages = list(harvest_pushshift.judged_comments([str(path)], 2, receive))
    chunks = [m for m in messages if m[0] == "chunk"]
    assert len(chunks) > 1
    # over budget: it waits at once; within: it polls after each chunk and waits at the end
    assert asked == ([True] if budget == 0 else [False] * len(chunks) + [True])
    assert sum(m[1] for m in chunks) == 501 and messages[-1] == ("dump_end",)
    kept = [pa.ipc.read_record_batch(m[3][1], harvest_pushshift.COMMENTS).num_rows for m in chunks]
    rejects = [r for m in chunks for r in pa.ipc.read_record_batch(m[4], harvest_pushshift.REJECTS).to_pylist()]
    assert sum(kept) == 500 and rejects == [{"id": "reddit:late", "reason": "post_not_kept", "detail": "t3_gone"}]


def test_posts_without_comments_and_comments_without_posts(tmp_path):
    rs = _zst(tmp_path / "RS_2023-01.zst", [_post("a"), _post("c", sub="pics")])
    posts, comments, rejects, report = _harvest(tmp_path, [rs])
    assert [p["id"] for p in posts] == ["reddit:a"] and comments == []
    assert report["rows_in"] == 2
    rc = _zst(tmp_path / "RC_2023-01.zst", [_comment("k1", "a"), _comment("k2", "a", parent="t1_k1")])
    posts, comments, rejects, report = _harvest(tmp_path, [rc])
    assert posts == [] == comments
    assert [(r["id"], r["reason"]) for r in rejects] == [("reddit:k1", "post_not_kept"), ("reddit:k2", "not_top_level")]
    assert report["rows_in"] == 2


def test_comments_land_in_their_posts_shard(tmp_path):
    rs = _zst(tmp_path / "askscience_submissions.zst", [_post(f"p{i}") for i in range(20)])
    rc = _zst(tmp_path / "askscience_comments.zst", [_comment(f"c{i}", f"p{i}") for i in range(20)])
    out = tmp_path / "out"
    _harvest(tmp_path, [rs, rc], shards=3)
    for i in range(3):
        post_ids = {r["id"] for r in pq.read_table(out / f"posts.{i:05d}.parquet").to_pylist()}
        comment_posts = {r["post_id"] for r in pq.read_table(out / f"comments.{i:05d}.parquet").to_pylist()}
        assert comment_posts == post_ids


def test_truncated_file_and_bad_lines_are_rejects(tmp_path):
    records = [_post(f"p{i}", title="x" * 200) for i in range(3000)]
    data = zstandard.ZstdCompressor().compress(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    path = tmp_path / "RS_2023-02.zst"
    path.write_bytes(data[: len(data) * 2 // 3])
    posts, _, rejects, report = _harvest(tmp_path, [path], shards=1)
    reasons = [r["reason"] for r in rejects]
    assert reasons.count("truncated_frame") == 1
    assert 0 < len(posts) < 3000
    assert report["rows_in"] == len(posts) + len(rejects)


def test_reader_streams_multi_frame_files(tmp_path):
    path = tmp_path / "RS_x.zst"
    c = zstandard.ZstdCompressor()
    path.write_bytes(c.compress(b"1\n2\n") + c.compress(b"3\n4"))
    assert list(read_zstd_lines(str(path), chunk_size=5)) == [b"1", b"2", b"3", b"4"]
    path.write_bytes(c.compress(b"1\n2\n" * 5000)[:-20])
    with pytest.raises(TruncatedFrame):
        list(read_zstd_lines(str(path)))


def test_unknown_dump_name_is_a_clear_error(tmp_path):
    path = _zst(tmp_path / "reddit_stuff.zst", [_post("a")])
    out = tmp_path / "out"
    result = run_stage("harvest_pushshift", f"--input=dumps={path}", f"--output=posts={out}/p.parquet",
                       f"--output=comments={out}/c.parquet", "--params", json.dumps({"domains": DOMAINS}), check=False)
    assert result.returncode != 0
    assert "reddit_stuff.zst: not a pushshift dump name" in result.stderr


def test_demo_tables_match_the_row_by_row_harvest(tmp_path):
    """The bundled sample gives the same rows, in the same order, and the same rejects as the
    row-by-row harvest that preceded the batched one (recorded in tests/data)."""
    from stages.mavis.harvest_pushshift import STAGE

    config = demo_config()["mavis"]["harvest_pushshift"]
    params = {k: config.get(k, STAGE.params[k].default) for k in STAGE.params}  # the demo's settings and the stage's defaults
    out = tmp_path / "out"
    args = [f"--input=dumps={REPO / f}" for f in config["files"]]
    args += [f"--output=posts={out}/posts.{i}.parquet" for i in range(2)]
    args += [f"--output=comments={out}/comments.{i}.parquet" for i in range(2)]
    run_stage("harvest_pushshift", *args, "--params", json.dumps(params))
    got = {f"{t}.{i}": pq.read_table(out / f"{t}.{i}.parquet").to_pylist() for t in ("posts", "comments") for i in range(2)}
    got["rejects"] = pq.read_table(out / "posts.0.parquet.rejects.parquet").to_pylist()
    expected = json.loads((REPO / "tests" / "data" / "harvest_pushshift_demo_expected.json").read_text())
    assert sum(len(rows) for rows in expected.values()) == 30 + 73 + 80
    # the recording predates gallery-item rejects: those are checked against the kept galleries
    items = [r for r in got["rejects"] if r["reason"] in GALLERY_ITEM_REASONS]
    got["rejects"] = [r for r in got["rejects"] if r["reason"] not in GALLERY_ITEM_REASONS]
    for name, rows in expected.items():
        assert got[name] == rows, name
    galleries = {}
    for path in config["files"]:
        for line in read_zstd_lines(str(REPO / path)):
            try:
                record = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # the sample's one bad line
            if "title" in record and record.get("is_gallery"):
                galleries[f"reddit:{record['id']}"] = record
    kept = [p for t in ("posts.0", "posts.1") for p in got[t] if p["is_gallery"]]
    assert kept and len(items) >= len(kept)
    expected_items = []
    for post in kept:
        dropped = []
        image_urls(galleries[post["id"]], tuple(params["image_extensions"]), dropped)
        expected_items += [(f"{post['id']}:{media}", reason, detail) for media, reason, detail in dropped]
    assert sorted((r["id"], r["reason"], r["detail"]) for r in items) == sorted(expected_items)


def test_subreddit_byte_prefilter_agrees_with_the_parse(tmp_path):
    """Out-of-scope posts are rejected from their bytes only when the bytes are unambiguous:
    a nested subreddit key, an escaped name or a kept id goes through the full rules."""
    crosspost = _post("x", crosspost_parent_list=[{"id": "orig", "subreddit": "pics"}])
    rs = _zst(tmp_path / "RS_2023-01.zst", [_post("a"), crosspost, _post("a", sub="pics"), _post("o", sub="Pics")],
              extra_lines=[b'{"id":"e","subreddit":"ask\\u0073cience","url":"https://i.redd.it/e.jpg"}',
                           b'{"id":"t","subreddit":"pics","title":"unterminated'])
    posts, _, rejects, report = _harvest(tmp_path, [rs], shards=1)
    assert sorted(p["id"] for p in posts) == ["reddit:a", "reddit:e", "reddit:x"]
    assert [(r["id"], r["reason"], r["detail"]) for r in rejects] == [
        ("reddit:a", "duplicate", "post seen in an earlier dump"),
        ("reddit:o", "subreddit_not_configured", "Pics"),
        ("RS_2023-01.zst:6", "bad_json", rejects[-1]["detail"]),  # no closing brace: parsed, not guessed
    ]
    assert report["rows_in"] == 6 == len(posts) + len(rejects)
