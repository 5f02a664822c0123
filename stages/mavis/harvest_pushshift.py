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
unescaped, items with `status == "valid"` only; each item left out of a kept post is a
gallery_item_failed or gallery_item_no_metadata reject `reddit:<post id>:<media id>`, as in
harvest_reddit_live). Kept comments: top level (`parent_id` = `t3_…`)
under a kept post (`link_id` = `t3_<post id>`).

Every record is checked at the boundary, field by field: a comment in full before its rules, a
post once its id and subreddit pass (a duplicate or out-of-scope post is not checked further,
which keeps monthly dumps, mostly other subreddits, cheap; see Speed). The checks live in
stages/core/reddit_records.py, shared with the live API harvest (harvest_reddit_live). Types accepted:
- `id`, `subreddit`, `link_id`: a non-empty string (absent or empty: missing_field);
- `title`, `selftext`, `url`, `permalink`, `body`, `parent_id`, `author`, gallery keys: a string or null;
- `created_utc`, `score`, `num_comments`: an int64, or null (read as 0). Two coercions are safe
  and kept: a decimal integer string (`"1672531200"`, as older dumps write `created_utc`) and an
  integral float (`5.0`); any other value (`"ten"`, an ISO date, `5.5`, `true`, out of int64
  range) is bad_field_type;
- `over_18`, `is_gallery`: a JSON boolean or null. Text such as `"false"` is bad_field_type, not
  guessed at: a post with an unreadable NSFW flag is dropped, never kept;
- `gallery_data` an object whose `items` is a list of objects, `media_metadata` an object of
  objects (`s` an object): anything else is bad_field_type.
A bad_field_type detail names the field, the value and its type. A whole-input problem (a file
that is not zstd, an empty or corrupt one) fails the stage with one line naming the file; a file
that ends mid-frame is one truncated_frame reject after its readable lines.

Speed: a monthly dump is mostly other subreddits, so a post's subreddit is first read from the
line's bytes: a line that is one JSON object holding `"subreddit":"<name>"` and `"id":"<id>"` once
each, without escapes, and naming an unconfigured subreddit, is a subreddit_not_configured reject
without a parse (a post with an id already kept still goes to the duplicate rule). Any other line
is first decoded (msgspec) into the plain shape of its kind (`PlainPost`, `PlainComment` in
reddit_records: the fields the rules read, each of its plain type; the other fields are skipped,
not built): such a record needs no field check. A line that does not decode so is parsed (orjson)
and judged in full, so a malformed in-scope record is still named by its defect; a malformed
record that plainly names an unconfigured subreddit is rejected as out of scope. msgspec does not
check the bytes of the fields it skips, so a chunk that is not UTF-8 throughout goes the parsed
way (bad_json for its bad lines); a number past a double's range in a field the harvest does not
read is valid JSON and no longer a reason to reject the line. A dump is read 64 KiB of compressed
bytes at a time (about 1 MB of text: a chunk's lines and records stay in cache). Everything after
the decode is batched per decompressed chunk (a chunk's comments decoded at once): lines are
counted at once, the cheapest rules run first, rejects are gathered and written as Arrow batches
(`ctx.reject_many`) of the writers' batch size and at each dump's end, kept rows are tuples
gathered per shard and written as Arrow batches of the shard writer's batch size (so the Parquet
files are the same, byte for byte, as row-by-row writes). The checks raise `Reject` and the line
loop records it, instead of opening a `ctx.item` scope per record, which costs more than parsing
the line. The cyclic garbage collector is off while reading (parsed records hold no cycles).

Outputs, one file per shard (stable hash of the post id, comments sharded with their post):
`posts` (reddit_posts) and `comments` (reddit_comments).
Invariant: records read (lines, plus one per truncated file) = posts + comments + rejected -
dropped gallery items (those rejects are parts of kept posts, not records).
Reject ids are `reddit:<id>` (`reddit:<post id>:<media id>` for a gallery item), or
`<file>:<line>` for a line without a usable id.
Reject reasons: bad_json, not_an_object, missing_field, bad_field_type, duplicate,
subreddit_not_configured, nsfw, no_image, gallery_without_valid_images, not_top_level,
post_not_kept, truncated_frame, gallery_item_failed, gallery_item_no_metadata.
"""
from __future__ import annotations

import codecs
import gc
import os
import re
from pathlib import Path
from typing import Iterator

import msgspec
import orjson
import pyarrow as pa
import zstandard
from tqdm import tqdm

from stages.core.ids import shard_of
from stages.core.reddit_records import (PlainComment, PlainPost, bad_field, comment_fields, direct_image, image_urls, plain_gallery_urls,
                                        post_fields, record_id)
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "3"

MAX_WINDOW = 2**31  # pushshift dumps are compressed with --long=31
CHUNK_SIZE = 1 << 16  # compressed bytes per read (see Speed)
_SUBMISSIONS = re.compile(r"^(RS_\d{4}-\d{2}|.+_submissions)\.zst$")
_COMMENTS = re.compile(r"^(RC_\d{4}-\d{2}|.+_comments)\.zst$")

GALLERY_ITEM_REASONS = ("gallery_item_failed", "gallery_item_no_metadata")


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


def read_zstd_chunks(path: str, chunk_size: int = CHUNK_SIZE, progress: tqdm | None = None) -> Iterator[tuple[bytes, list[bytes]]]:
    """Yield (text, lines) per compressed chunk read of a (multi-frame) zstd file: the non-blank
    lines that end in this chunk and the decompressed text they were split from (which may end
    inside the next line); raise TruncatedFrame after the last complete line if the file ends
    mid-frame (the partial last line is yielded, so it becomes a bad_json reject rather than
    vanishing)."""
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
            text = tail + b"".join(out)
            lines = text.split(b"\n")
            tail = lines.pop()
            lines = [line for line in lines if line and not line.isspace()]
            if lines:
                yield text, lines
    if tail and not tail.isspace():
        yield tail, [tail]
    if in_frame:
        raise TruncatedFrame(f"{path} ends inside a zstd frame")


def read_zstd_lines(path: str, chunk_size: int = CHUNK_SIZE, progress: tqdm | None = None) -> Iterator[bytes]:
    """The lines of `read_zstd_chunks`, one at a time."""
    for _, lines in read_zstd_chunks(path, chunk_size, progress):
        yield from lines


class _ShardRows:
    """Kept rows of one table as tuples per shard (columns in schema order), written as Arrow
    tables of exactly the shard writer's batch size: the same row groups, so the same files, as
    row-by-row writes."""

    def __init__(self, ctx, name: str, shards: int):
        self.writers = [ctx.writer(name, i) for i in range(shards)]
        self.schema = self.writers[0].schema
        self.batch_rows = self.writers[0].batch_rows
        self.rows: list[list[tuple]] = [[] for _ in range(shards)]

    def flush(self, final: bool = False) -> None:
        """Write every full batch (and, when `final`, what is left)."""
        size = self.batch_rows
        for shard, rows in enumerate(self.rows):
            done = len(rows) if final else len(rows) - len(rows) % size
            for start in range(0, done, size):
                columns = zip(*rows[start : start + size])
                arrays = [pa.array(values, type=field.type) for values, field in zip(columns, self.schema)]
                self.writers[shard].write_many(pa.Table.from_arrays(arrays, schema=self.schema))
            if done:
                del rows[:done]


def _plain_value(line: bytes, key: bytes) -> bytes | None:
    """The value of `key` (b'"name":"') when the line is one JSON object holding it once, as a
    string without escapes; None when the bytes alone cannot tell (then the line is parsed)."""
    start = line.find(key) + len(key)
    if start < len(key) or line.find(key, start) >= 0 or line[:1] != b"{" or line[-1:] != b"}":
        return None
    end = line.find(b'"', start)
    value = line[start:end]
    return value if end > start and b"\\" not in value else None


def _valid_utf8(text: bytes) -> bool:
    """Whether a chunk is UTF-8 throughout (an incomplete character at its end is the next line's).
    msgspec does not check the bytes of the fields it skips; the JSON parse does."""
    if text.isascii():
        return True
    try:
        codecs.utf_8_decode(text, None, False)
    except UnicodeDecodeError:
        return False
    return True


# msgspec's failures on a line: malformed JSON, a value off the plain types, invalid UTF-8 in a
# field it reads, nesting too deep. Any of them sends the line to the checks, which name its defect.
_NOT_PLAIN = (msgspec.DecodeError, ValueError, RecursionError)


class _Harvest:
    """The rules, with the state they share across dumps (kept posts, seen comments)."""

    def __init__(self, ctx):
        params = ctx.params
        self.ctx = ctx
        self.subreddit_domain = {sub.lower(): domain for domain, subs in params["domains"].items() for sub in subs}
        self.extensions = tuple(e.lower() for e in params["image_extensions"])
        self.include_nsfw = params["include_nsfw"]
        self.configured = {sub.encode() for sub in self.subreddit_domain}
        self.shards = len(ctx.output_paths("posts"))
        self.posts = _ShardRows(ctx, "posts", self.shards)
        self.comments = _ShardRows(ctx, "comments", self.shards)
        self.kept_posts: dict[str, int] = {}  # post id -> shard
        self.seen_comments: set[str] = set()
        self.item: str | None = None  # id of the post being judged, once it is known
        self.reject_ids: list[str] = []  # this chunk's rejects, written together by `flush`
        self.reject_reasons: list[str] = []
        self.reject_details: list[str] = []
        self.gallery_items_dropped = 0
        self.decode_post = msgspec.json.Decoder(PlainPost).decode
        self.decode_comment = msgspec.json.Decoder(PlainComment).decode

    def reject(self, item_id: str, reason: str, detail: str) -> None:
        self.reject_ids.append(item_id)
        self.reject_reasons.append(reason)
        self.reject_details.append(detail)

    def flush(self, dump_end: bool = False) -> None:
        """Write every full batch of kept rows, and the rejects gathered once they fill a batch of
        the writers' size or the dump ends."""
        if dump_end or len(self.reject_ids) >= self.posts.batch_rows:
            self.ctx.reject_many(self.reject_ids, self.reject_reasons, self.reject_details)
            self.reject_ids, self.reject_reasons, self.reject_details = [], [], []
        self.posts.flush()
        self.comments.flush()

    def out_of_scope(self, line: bytes) -> tuple[str, str] | None:
        """(post id, subreddit) of a post line whose subreddit is plainly not configured, read from
        the bytes without parsing the line (most of a monthly dump). None when unsure: the line is
        parsed and judged in full."""
        subreddit = _plain_value(line, b'"subreddit":"')
        post_id = subreddit and _plain_value(line, b'"id":"')
        if not post_id:
            return None
        try:
            post_id, subreddit = post_id.decode(), subreddit.decode()
        except UnicodeDecodeError:
            return None  # the parse says bad_json
        if subreddit.lower() in self.subreddit_domain or post_id in self.kept_posts:  # a repeat is a duplicate first
            return None
        return post_id, subreddit

    def submission(self, post) -> None:
        """Keep one post or raise Reject. Its subreddit decides first; the other fields are
        checked once it is in scope."""
        post_id = record_id(post, "subreddit")
        self.item = "reddit:" + post_id
        subreddit = post["subreddit"]
        if type(subreddit) is not str:
            raise bad_field("subreddit", subreddit, "a string")
        if post_id in self.kept_posts:
            raise Reject("duplicate", "post seen in an earlier dump")
        domain = self.subreddit_domain.get(subreddit.lower())
        if domain is None:
            raise Reject("subreddit_not_configured", subreddit)
        title, selftext, url, is_gallery, author, created, score, comments, over_18, permalink = post_fields(post)
        if over_18 and not self.include_nsfw:
            raise Reject("nsfw", subreddit)
        dropped: list[tuple[str, str, str]] = []
        urls, problem = image_urls(post, self.extensions, dropped)
        if problem:
            raise Reject(problem, url[:300])
        self.keep(post_id, (post_id, subreddit, domain, title, selftext, url, urls, is_gallery, author, created, score, comments,
                            over_18, permalink), dropped)

    def plain_submission(self, post: PlainPost) -> None:
        """`submission` for a post of plain types: no field check left."""
        post_id = post.id
        self.item = "reddit:" + post_id
        if post_id in self.kept_posts:
            raise Reject("duplicate", "post seen in an earlier dump")
        subreddit = post.subreddit
        domain = self.subreddit_domain.get(subreddit.lower())
        if domain is None:
            raise Reject("subreddit_not_configured", subreddit)
        if post.over_18 and not self.include_nsfw:
            raise Reject("nsfw", subreddit)
        dropped: list[tuple[str, str, str]] = []
        if post.is_gallery:
            urls = plain_gallery_urls(post, dropped)
            problem = None if urls else "gallery_without_valid_images"
        else:
            url = direct_image(post.url, self.extensions)
            urls, problem = ([url], None) if url else ([], "no_image")
        if problem:
            raise Reject(problem, post.url[:300])
        self.keep(post_id, (post_id, subreddit, domain, post.title, post.selftext, post.url, urls, post.is_gallery, post.author,
                            post.created_utc, post.score, post.num_comments, post.over_18, post.permalink), dropped)

    def keep(self, post_id: str, row: tuple, dropped: list[tuple[str, str, str]]) -> None:
        """Keep a post (its row without the id column); its dropped gallery items become rejects."""
        item_id = "reddit:" + post_id
        for media_id, reason, detail in dropped:
            self.reject(f"{item_id}:{media_id}", reason, detail)
        self.gallery_items_dropped += len(dropped)
        shard = shard_of(item_id, self.shards)
        self.kept_posts[post_id] = shard
        self.posts.rows[shard].append((item_id, *row))

    def read_submissions(self, lines: list[bytes], name: str, line_no: int, plain: bool) -> None:
        loads, reject, out_of_scope, configured = orjson.loads, self.reject, self.out_of_scope, self.configured
        decode = self.decode_post
        for line in lines:
            line_no += 1
            # a first look at the bytes costs a fraction of a parse: only a post that looks out of
            # scope gets the careful byte check, and only a plainly out-of-scope one skips the parse
            at = line.find(b'"subreddit":"') + 13
            if at >= 13 and line[at : line.find(b'"', at)].lower() not in configured:
                scope = out_of_scope(line)
                if scope is not None:
                    reject("reddit:" + scope[0], "subreddit_not_configured", scope[1])
                    continue
            self.item = None
            post = None
            if plain:
                try:
                    post = decode(line)
                except _NOT_PLAIN:
                    pass
            try:
                if post is None:
                    self.submission(loads(line))
                else:
                    self.plain_submission(post)
            except orjson.JSONDecodeError as err:
                reject(f"{name}:{line_no}", "bad_json", str(err))
            except Reject as rejected:
                reject(self.item or f"{name}:{line_no}", rejected.reason, rejected.detail)

    def read_comments(self, lines: list[bytes], name: str, line_no: int, plain: bool) -> None:
        """The comment rules, inline: this loop runs once per comment, the bulk of a dump. A chunk's
        comments are decoded as plain records at once; a line that is not one is parsed and checked
        (`comment_fields`), which names its defect."""
        loads, reject, checked, decode = orjson.loads, self.reject, comment_fields, self.decode_comment
        seen, kept, rows = self.seen_comments, self.kept_posts, self.comments.rows
        records: list = [None] * len(lines)
        if plain:
            try:
                records = [decode(line) for line in lines]
            except _NOT_PLAIN:
                records = [self.plain_comment(line) for line in lines]
        for line, record in zip(lines, records):
            line_no += 1
            if record is not None:
                comment_id, link_id, parent_id = record.id, record.link_id, record.parent_id
            else:
                try:
                    record = loads(line)
                    comment_id, link_id, parent_id, body, score, author, created = checked(record)
                except orjson.JSONDecodeError as err:
                    reject(f"{name}:{line_no}", "bad_json", str(err))
                    continue
                except Reject as rejected:
                    valid_id = type(record) is dict and type(record.get("id")) is str and record.get("id")
                    reject(f"reddit:{record['id']}" if valid_id else f"{name}:{line_no}", rejected.reason, rejected.detail)
                    continue
                record = PlainComment(comment_id, link_id, parent_id, body, score, author, created)
            if comment_id in seen:
                reject("reddit:" + comment_id, "duplicate", "comment seen in an earlier dump")
                continue
            seen.add(comment_id)
            if not parent_id.startswith("t3_"):
                reject("reddit:" + comment_id, "not_top_level", parent_id)
                continue
            post_id = link_id[3:] if link_id.startswith("t3_") else link_id
            shard = kept.get(post_id)
            if shard is None:
                reject("reddit:" + comment_id, "post_not_kept", link_id)
                continue
            rows[shard].append(("reddit:" + comment_id, "reddit:" + post_id, record.body, record.score, record.author, record.created_utc))

    def plain_comment(self, line: bytes) -> PlainComment | None:
        try:
            return self.decode_comment(line)
        except _NOT_PLAIN:
            return None

    def read(self, path: str, progress: tqdm) -> None:
        """Every line of one dump through the rules of its kind."""
        ctx, name = self.ctx, Path(path).name
        if os.path.getsize(path) == 0:
            raise StageError(f"{path}: empty file, not a zstd dump")
        judge = self.read_submissions if dump_kind(path) == "submissions" else self.read_comments
        line_no = 0
        try:
            for text, lines in read_zstd_chunks(path, progress=progress):
                ctx.add_input(len(lines))
                judge(lines, name, line_no, _valid_utf8(text))
                line_no += len(lines)
                self.flush()
        except TruncatedFrame as err:
            ctx.add_input()
            self.reject(f"{name}:{line_no + 1}", "truncated_frame", str(err))
        except zstandard.ZstdError as err:
            raise StageError(f"{path}: not a readable zstd file ({err})") from None
        self.flush(dump_end=True)


def run(ctx):
    n_shards = len(ctx.output_paths("posts"))
    if len(ctx.output_paths("comments")) != n_shards:
        raise StageError("posts and comments need the same number of shard outputs")
    files = ctx.input_paths("dumps")
    kinds = {path: dump_kind(path) for path in files}
    ordered = [p for p in files if kinds[p] == "submissions"] + [p for p in files if kinds[p] == "comments"]
    harvest = _Harvest(ctx)
    total = sum(os.path.getsize(p) for p in ordered)
    # Each line allocates a parsed dict that holds no cycle; the kept rows pile up. The cyclic
    # collector's passes over that growing heap cost a third of the reading, and free nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with tqdm(total=total, unit="B", unit_scale=True, desc="harvest_pushshift", mininterval=2) as bar:
            for path in ordered:
                harvest.read(path, bar)
        harvest.posts.flush(final=True)
        harvest.comments.flush(final=True)
    finally:
        if collecting:
            gc.enable()
    ctx.stats["kept_posts"] = len(harvest.kept_posts)
    ctx.stats["gallery_items_dropped"] = harvest.gallery_items_dropped


def invariant(ctx) -> str | None:
    """Dropped gallery items are rejects that are parts of kept posts, not records read."""
    items = sum(ctx.rejected_by_reason[r] for r in GALLERY_ITEM_REASONS)
    out = ctx.rows_out("posts") + ctx.rows_out("comments")
    if ctx.rows_in != out + ctx.rejected - items:
        return f"records {ctx.rows_in} != posts and comments {out} + rejected {ctx.rejected - items} (besides {items} gallery items)"
    return None


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
    invariant=invariant,
)

if __name__ == "__main__":
    STAGE.main()
