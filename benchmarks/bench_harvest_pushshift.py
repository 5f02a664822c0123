"""Harvest throughput against the bare cost of reading the same dump.

    python benchmarks/bench_harvest_pushshift.py [--mb 200] [--shape minimal|dump]

Generates a monthly pushshift pair (RS_/RC_) of at least --mb MB uncompressed with the demo
generator, its records either as the demo writes them (`minimal`: the fields the harvest reads,
about 520 bytes a post and 400 a comment) or with the other fields a real dump's records carry
(`dump`: the field names of the 2023 dumps, awards, flair, moderation flags, a post's preview
images; about 4.1 KB a post and 1.4 KB a comment), then times, in the same run and on the same files, --repeat times each, interleaved (best kept):
  baseline  zstd stream decode + orjson parse of every line, nothing else (its own loop, not the
            stage's reader);
  harvest   the harvest_pushshift stage end to end (checks, rules, sharded Parquet writes, rejects),
            which judges the comments in a second process while it judges the posts.
Prints MB/s (uncompressed) for both and the harvest/baseline ratio of wall time, and the CPU
seconds of each (the harvest's counting its comment reader process and writer threads): the
harvest trades CPU for wall time on two cores. Shared machines are noisy: compare the ratio of
one run, not MB/s across runs; the load average is printed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml
import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from make_reddit_sample import build, write_zst  # noqa: E402
from stages.mavis.harvest_pushshift import MAX_WINDOW, STAGE  # noqa: E402


def dump_shaped(record: dict, kind: str, n: int) -> dict:
    """`record` with the fields a 2023 pushshift record carries besides those the harvest reads
    (names as in the dumps, values made up): it reads them as a real dump's, skipping them."""
    author = record.get("author") or "[deleted]"
    common = {
        "all_awardings": [], "archived": False, "author_flair_background_color": None, "author_flair_css_class": None,
        "author_flair_richtext": [], "author_flair_template_id": None, "author_flair_text": None, "author_flair_text_color": None,
        "author_flair_type": "text", "author_fullname": f"t2_{n:08x}", "author_patreon_flair": False, "author_premium": n % 7 == 0,
        "can_gild": True, "distinguished": None, "edited": False, "gilded": 0, "gildings": {}, "locked": False,
        "name": f"{'t3' if kind == 'post' else 't1'}_{record['id']}", "no_follow": n % 3 == 0, "retrieved_on": record["created_utc"] + 86400,
        "send_replies": True, "stickied": False, "subreddit_id": f"t5_{n % 97:06x}", "subreddit_name_prefixed": f"r/{record.get('subreddit') or 'x'}",
        "subreddit_type": "public", "top_awarded_type": None, "total_awards_received": 0, "treatment_tags": [], "ups": record["score"],
        "author_is_blocked": False, "controversiality": 0, "score_hidden": False, "unrepliable_score": False,
    }
    if kind == "comment":
        return {**record, **common, "associated_award": None, "collapsed": False, "collapsed_because_crowd_control": None,
                "collapsed_reason": None, "collapsed_reason_code": None, "comment_type": None, "is_submitter": n % 5 == 0,
                "permalink": f"/r/x/comments/{record['link_id'][3:]}/comment/{record['id']}/"}
    base = f"https://preview.redd.it/{record['id']}abcdefghijklmnop.jpg"
    resolutions = [{"url": f"{base}?width={w}&amp;crop=smart&amp;auto=webp&amp;s={n:040x}", "width": w, "height": w * 3 // 4}
                   for w in (108, 216, 320, 640, 960, 1080)]
    return {**record, **common, "allow_live_comments": False, "approved_at_utc": None, "approved_by": None, "awarders": [],
            "banned_at_utc": None, "banned_by": None, "can_mod_post": False, "category": None, "clicked": False, "content_categories": None,
            "contest_mode": False, "created": record["created_utc"], "discussion_type": None, "domain": "i.redd.it", "downs": 0,
            "hidden": False, "hide_score": False, "is_created_from_ads_ui": False, "is_crosspostable": True, "is_meta": False,
            "is_original_content": False, "is_reddit_media_domain": True, "is_robot_indexable": True, "is_self": False, "is_video": False,
            "likes": None, "link_flair_background_color": "", "link_flair_css_class": None, "link_flair_richtext": [], "link_flair_text": None,
            "link_flair_text_color": "dark", "link_flair_type": "text", "media": None, "media_embed": {}, "media_only": False, "mod_note": None,
            "mod_reason_by": None, "mod_reason_title": None, "mod_reports": [], "num_crossposts": 0, "num_reports": None,
            "parent_whitelist_status": "all_ads", "pinned": False, "post_hint": "image",
            "preview": {"enabled": True, "images": [{"id": f"{n:043x}", "resolutions": resolutions, "variants": {},
                                                    "source": {"url": f"{base}?auto=webp&amp;s={n:040x}", "width": 3024, "height": 4032}}]},
            "pwls": 6, "quarantine": False, "removal_reason": None, "removed_by": None, "removed_by_category": None, "report_reasons": None,
            "saved": False, "secure_media": None, "secure_media_embed": {}, "spoiler": False, "subreddit_subscribers": 21_000_000 + n % 1000,
            "suggested_sort": None, "thumbnail": f"https://b.thumbs.redditmedia.com/{n:040x}.jpg", "thumbnail_height": 140,
            "thumbnail_width": 140, "upvote_ratio": 0.97, "url_overridden_by_dest": record.get("url"), "user_reports": [],
            "view_count": None, "visited": False, "whitelist_status": "all_ads", "wls": 6}


def bare_parse(dumps: list[str]) -> tuple[float, int]:
    """Seconds to stream-decode the dumps and orjson-parse every line, and the line count."""
    started = time.perf_counter()
    lines = 0
    dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
    for dump in dumps:
        tail = b""
        with open(dump, "rb") as fh, dctx.stream_reader(fh, read_across_frames=True) as reader:
            while chunk := reader.read(1 << 24):
                parts = (tail + chunk).split(b"\n")
                tail = parts.pop()
                for line in parts:
                    if line:
                        orjson.loads(line)
                        lines += 1
        if tail:
            orjson.loads(tail)
            lines += 1
    return time.perf_counter() - started, lines


def _cpu_with_children() -> float:
    """CPU seconds of this process and of its ended child processes."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200.0, help="minimum uncompressed size of the dump pair")
    parser.add_argument("--repeat", type=int, default=2, help="timed runs of each; the best is reported")
    parser.add_argument("--shape", choices=("minimal", "dump"), default="minimal",
                        help="records as the demo writes them, or with the other fields of a real dump's records")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        posts = 1000
        while True:  # size the dump from a small probe
            p, c = build(posts)
            if args.shape == "dump":
                p = [dump_shaped(r, "post", n) for n, r in enumerate(p)]
                c = [dump_shaped(r, "comment", n) for n, r in enumerate(c)]
            size = sum(len(orjson.dumps(r)) + 1 for r in p + c)
            if size >= args.mb * 1e6:
                break
            posts = int(posts * args.mb * 1e6 / size * 1.02) + 1
        started = time.perf_counter()
        write_zst(tmp / "RS_2023-01.zst", p, level=3)
        write_zst(tmp / "RC_2023-01.zst", c, level=3)
        del p, c
        dumps = [str(tmp / "RS_2023-01.zst"), str(tmp / "RC_2023-01.zst")]
        compressed = sum(Path(d).stat().st_size for d in dumps)
        print(f"dump ({args.shape} records): {posts} posts, {size / 1e6:.1f} MB uncompressed, {compressed / 1e6:.1f} MB zstd "
              f"(generated in {time.perf_counter() - started:.1f}s)")

        config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())["mavis"]["harvest_pushshift"]
        params = {k: v for k, v in config.items() if k != "files"}
        baseline = harvest = baseline_cpu = harvest_cpu = float("inf")
        for attempt in range(args.repeat):  # interleaved, so both see the same machine load
            cpu = time.process_time()
            seconds, lines = bare_parse(dumps)
            baseline, baseline_cpu = min(baseline, seconds), min(baseline_cpu, time.process_time() - cpu)
            out = tmp / f"out{attempt}"
            argv = [f"--input=dumps={d}" for d in dumps]
            argv += [f"--output=posts={out}/posts.{i:05d}.parquet" for i in range(4)]
            argv += [f"--output=comments={out}/comments.{i:05d}.parquet" for i in range(4)]
            started, cpu = time.perf_counter(), _cpu_with_children()
            STAGE.main([*argv, "--params", json.dumps(params)])
            harvest, harvest_cpu = min(harvest, time.perf_counter() - started), min(harvest_cpu, _cpu_with_children() - cpu)
            report = json.loads((out / "posts.00000.parquet.report.json").read_text())

    mb = size / 1e6
    print(f"records: {lines} lines; harvest kept {sum(report['rows_out'].values())}, rejected {report['rejected']}")
    print(f"baseline zstd decode + orjson parse: {baseline:7.2f}s  {mb / baseline:8.1f} MB/s")
    print(f"harvest_pushshift end to end:        {harvest:7.2f}s  {mb / harvest:8.1f} MB/s")
    print(f"harvest / baseline throughput ratio: {baseline / harvest:.2f} (target >= 0.5)")
    print(f"CPU seconds: baseline {baseline_cpu:.2f}s, harvest {harvest_cpu:.2f}s (both processes), ratio {baseline_cpu / harvest_cpu:.2f} (target >= 0.5)")
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
