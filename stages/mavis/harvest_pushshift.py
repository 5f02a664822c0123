"""Harvest Reddit image posts and their top-level comments from pushshift dumps.

MAVIS §3.2 Step 1 ("Raw data"): posts that contain images, from the configured subreddits, with
the comments that may answer them. Dumps are zstd-compressed NDJSON, monthly
(`RS_YYYY-MM.zst` submissions, `RC_YYYY-MM.zst` comments) or per subreddit
(`<sub>_submissions.zst`, `<sub>_comments.zst`); they are streamed with a large decoder window, so
memory stays flat whatever the dump size. Submissions are read before comments, so a comment's
post is known whichever file order is given.

Kept posts: subreddit in the MAVIS Table 11 mapping (param `domains`), not NSFW unless asked,
and with an image: a direct image url (i.redd.it or an image extension) or a gallery
(`is_gallery`, order from `gallery_data.items`, urls from `media_metadata[id].s.u` with `&amp;`
unescaped, items with `status == "valid"` only). Kept comments: top level (`parent_id` = `t3_…`)
under a kept post (`link_id` = `t3_<post id>`).

Outputs, one file per shard (stable hash of the post id, comments sharded with their post):
`posts` (reddit_posts) and `comments` (reddit_comments).
Invariant: records read (lines, plus one per truncated file) = posts + comments + rejected.
Reject reasons: bad_json, not_an_object, missing_field, duplicate, subreddit_not_configured, nsfw,
no_image, gallery_without_valid_images, not_top_level, post_not_kept, truncated_frame.
"""
from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Iterator
from urllib.parse import urlsplit

import orjson
import zstandard
from tqdm import tqdm

from stages.core.ids import shard_of
from stages.core.stage import Input, Output, Param, Stage, StageError

VERSION = "1"

MAX_WINDOW = 2**31  # pushshift dumps are compressed with --long=31
_SUBMISSIONS = re.compile(r"^(RS_\d{4}-\d{2}|.+_submissions)\.zst$")
_COMMENTS = re.compile(r"^(RC_\d{4}-\d{2}|.+_comments)\.zst$")


class TruncatedFrame(Exception):
    """The file ended inside a zstd frame: the last records of the dump are missing."""


def dump_kind(path: str) -> str:
    name = Path(path).name
    if _SUBMISSIONS.match(name):
        return "submissions"
    if _COMMENTS.match(name):
        return "comments"
    raise StageError(
        f"{path}: not a pushshift dump name (expected RS_YYYY-MM.zst, RC_YYYY-MM.zst, "
        "<sub>_submissions.zst or <sub>_comments.zst)"
    )


def read_zstd_lines(path: str, chunk_size: int = 1 << 20, progress: tqdm | None = None) -> Iterator[bytes]:
    """Yield the lines of a (multi-frame) zstd file; raise TruncatedFrame after the last complete
    line if the file ends mid-frame (the partial last line is yielded, so it becomes a bad_json
    reject rather than vanishing)."""
    dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW)
    dobj = dctx.decompressobj()
    in_frame = False
    tail = b""
    with open(path, "rb") as fh:
        while True:
            compressed = fh.read(chunk_size)
            if not compressed:
                break
            if progress is not None:
                progress.update(len(compressed))
            out = []
            while compressed:
                in_frame = True
                out.append(dobj.decompress(compressed))
                if dobj.eof:  # a frame ended; the next one (if any) starts in unused_data
                    in_frame = False
                    compressed = dobj.unused_data
                    dobj = dctx.decompressobj()
                else:
                    compressed = b""
            lines = (tail + b"".join(out)).split(b"\n")
            tail = lines.pop()
            yield from (line for line in lines if line.strip())
    if tail.strip():
        yield tail
    if in_frame:
        raise TruncatedFrame(f"{path} ends inside a zstd frame")


def image_urls(post: dict, extensions: tuple[str, ...]) -> tuple[list[str], str | None]:
    """The post's image urls in display order, or ([], reject reason)."""
    if post.get("is_gallery"):
        items = ((post.get("gallery_data") or {}).get("items")) or []
        metadata = post.get("media_metadata") or {}
        urls = []
        for item in items:
            meta = metadata.get(item.get("media_id")) or {}
            source = meta.get("s") or {}
            url = source.get("u") or source.get("gif")
            if meta.get("status") == "valid" and url:
                urls.append(html.unescape(url))
        return (urls, None) if urls else ([], "gallery_without_valid_images")
    url = post.get("url") or ""
    if "&" in url:
        url = html.unescape(url)
    parts = urlsplit(url)
    if parts.netloc.lower() == "i.redd.it" or parts.path.lower().endswith(extensions):
        return [url], None
    return [], "no_image"


def _load(line: bytes) -> tuple[dict | None, str | None]:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as err:
        return None, f"bad_json: {err}"
    if not isinstance(record, dict):
        return None, "not_an_object"
    return record, None


def run(ctx):
    params = ctx.params
    subreddit_domain = {sub.lower(): domain for domain, subs in params["domains"].items() for sub in subs}
    extensions = tuple(e.lower() for e in params["image_extensions"])
    n_shards = len(ctx.output_paths("posts"))
    if len(ctx.output_paths("comments")) != n_shards:
        raise StageError("posts and comments need the same number of shard outputs")
    files = ctx.input_paths("dumps")
    kinds = {path: dump_kind(path) for path in files}
    ordered = [p for p in files if kinds[p] == "submissions"] + [p for p in files if kinds[p] == "comments"]
    kept_posts: dict[str, int] = {}  # post id -> shard
    seen_comments: set[str] = set()
    total = sum(os.path.getsize(p) for p in ordered)
    with tqdm(total=total, unit="B", unit_scale=True, desc="harvest_pushshift", mininterval=2) as bar:
        for path in ordered:
            handle = _harvest_submission if kinds[path] == "submissions" else _harvest_comment
            state = (subreddit_domain, extensions, n_shards, kept_posts, seen_comments)
            line_no = 0
            try:
                for line_no, line in enumerate(read_zstd_lines(path, progress=bar), start=1):
                    ctx.add_input()
                    record, problem = _load(line)
                    if problem:
                        reason, _, detail = problem.partition(": ")
                        ctx.reject(f"{Path(path).name}:{line_no}", reason, detail or line[:200].decode("utf-8", "replace"))
                        continue
                    handle(ctx, record, state)
            except TruncatedFrame as err:
                ctx.add_input()
                ctx.reject(f"{Path(path).name}:{line_no + 1}", "truncated_frame", str(err))
            except zstandard.ZstdError as err:
                raise StageError(f"{path}: not a readable zstd file ({err})") from None
    ctx.stats["kept_posts"] = len(kept_posts)


def _harvest_submission(ctx, post: dict, state) -> None:
    subreddit_domain, extensions, n_shards, kept_posts, _ = state
    post_id = post.get("id")
    if not post_id or not post.get("subreddit"):
        ctx.reject(str(post_id or "?"), "missing_field", "submission without id or subreddit")
        return
    item_id = f"reddit:{post_id}"
    domain = subreddit_domain.get(post["subreddit"].lower())
    if post_id in kept_posts:
        ctx.reject(item_id, "duplicate", "post seen in an earlier dump")
        return
    if domain is None:
        ctx.reject(item_id, "subreddit_not_configured", post["subreddit"])
        return
    if post.get("over_18") and not ctx.params["include_nsfw"]:
        ctx.reject(item_id, "nsfw", post["subreddit"])
        return
    urls, problem = image_urls(post, extensions)
    if problem:
        ctx.reject(item_id, problem, str(post.get("url") or "")[:300])
        return
    shard = shard_of(item_id, n_shards)
    kept_posts[post_id] = shard
    ctx.writer("posts", shard).write(
        {
            "id": item_id,
            "post_id": post_id,
            "subreddit": post["subreddit"],
            "domain": domain,
            "title": post.get("title") or "",
            "selftext": post.get("selftext") or "",
            "url": post.get("url") or "",
            "image_urls": urls,
            "is_gallery": bool(post.get("is_gallery")),
            "author": post.get("author"),
            "created_utc": int(post.get("created_utc") or 0),
            "score": int(post.get("score") or 0),
            "num_comments": int(post.get("num_comments") or 0),
            "over_18": bool(post.get("over_18")),
            "permalink": post.get("permalink") or "",
        }
    )


def _harvest_comment(ctx, comment: dict, state) -> None:
    _, _, _, kept_posts, seen_comments = state
    comment_id, link_id, parent_id = comment.get("id"), comment.get("link_id") or "", comment.get("parent_id") or ""
    if not comment_id or not link_id:
        ctx.reject(str(comment_id or "?"), "missing_field", "comment without id or link_id")
        return
    item_id = f"reddit:{comment_id}"
    if comment_id in seen_comments:
        ctx.reject(item_id, "duplicate", "comment seen in an earlier dump")
        return
    seen_comments.add(comment_id)
    post_id = link_id.removeprefix("t3_")
    if not parent_id.startswith("t3_"):
        ctx.reject(item_id, "not_top_level", parent_id)
        return
    if post_id not in kept_posts:
        ctx.reject(item_id, "post_not_kept", link_id)
        return
    ctx.writer("comments", kept_posts[post_id]).write(
        {
            "id": item_id,
            "post_id": f"reddit:{post_id}",
            "body": comment.get("body") or "",
            "score": int(comment.get("score") or 0),
            "author": comment.get("author"),
            "created_utc": int(comment.get("created_utc") or 0),
        }
    )


STAGE = Stage(
    name="harvest_pushshift",
    version=VERSION,
    doc=__doc__,
    inputs={"dumps": Input("pushshift .zst dump files", many=True, kind="file")},
    outputs={
        "posts": Output("reddit_posts", "kept image posts, one file per shard", many=True),
        "comments": Output("reddit_comments", "top-level comments of kept posts, sharded with their post", many=True),
    },
    params={
        "domains": Param(dict, help="domain -> list of subreddits (MAVIS Table 11)", items=Param(list, items=str)),
        "image_extensions": Param(list, [".jpg", ".jpeg", ".png", ".gif", ".webp"], "url path endings that count as a direct image", items=str),
        "include_nsfw": Param(bool, False, "keep posts marked over_18"),
    },
    run=run,
)

if __name__ == "__main__":
    STAGE.main()
