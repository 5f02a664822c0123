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
stages/mavis/reddit_records.py, shared with the live API harvest (harvest_reddit_live). Types accepted:
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

Speed: the posts and the comments are judged at once, on two cores. A comment reader process
(forked at the start, stages/core/forked.py) reads the comment dumps and applies the comment rules
that need no post (the checks, not_top_level) while this process judges the posts. It
holds its verdicts until this process sends it the kept posts (at most PENDING_TEXT of comment
text; then it waits for them), joins each chunk to them (post_not_kept, duplicate, or the post's shard) and
hands the chunk over as Arrow batches, at most READ_AHEAD chunks ahead. Every verdict is the one a
single process would reach: the kept posts are complete when the join runs. The kept posts are
sent before the posts' last rows are written, so the joins overlap those writes. Parquet encoding
runs in two writer threads (it releases the GIL), one write at a time per shard.

A chunk whose lines are each one plain record (none blank or indented, as many records as lines,
UTF-8 throughout; one numpy pass over the newlines tells) is decoded in one msgspec call into the
plain shape of its kind (`PlainPost`, `PlainComment` in reddit_records: the fields the rules read,
each of its plain type; the other fields are skipped, not built): such a record needs no field
check. Any other chunk goes line by line. There, as a monthly dump is mostly other subreddits, a
post's subreddit is first read from the line's bytes: a line that is one JSON object holding
`"subreddit":"<name>"` and `"id":"<id>"` once each, without escapes, and naming an unconfigured
subreddit, is a subreddit_not_configured reject without a parse (a post with an id already kept
still goes to the duplicate rule). Any other line is first decoded into its plain shape; a line
that does not decode so is parsed (orjson) and judged in full, so a malformed in-scope record is
still named by its defect; a malformed record that plainly names an unconfigured subreddit is
rejected as out of scope. msgspec does not check the bytes of the fields it skips, so a chunk that
is not UTF-8 throughout goes the parsed way (bad_json for its bad lines); a number past a double's
range in a field the harvest does not read is valid JSON and no longer a reason to reject the line.

Posts are read 64 KiB of compressed bytes at a time (about 1 MB of text: a chunk's lines and
records stay in cache), comments 256 KiB (fewer, larger hand-overs). Everything after the decode
is batched per chunk. The comment rules run column by column on Arrow arrays (one verdict row per
record, in line order, so rejects need no sort), and a chunk without a repeated id settles the
duplicate rule in two set operations (over the kept comments only: a monthly dump's hundreds of
millions of comment ids are never held). A plain post's reject is returned rather than raised. The
line loops record rejects themselves instead of opening a `ctx.item` scope per record, which
costs more than parsing the line. Rejects are written as Arrow batches (`ctx.reject_many`) of the
writers' batch size and at each dump's end. Kept rows become Arrow tables at each chunk's end, so
Python rows never pile up, and are written per shard as batches of exactly the shard writer's
batch size (so the Parquet files are the same, byte for byte, as row-by-row writes). The cyclic
garbage collector is off while reading (parsed records hold no cycles).

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
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import zstandard
from tqdm import tqdm

from stages.core.forked import ForkedGenerator
from stages.core.ids import shard_of
from stages.mavis.reddit_records import (REDDIT_REJECTS, PlainComment, PlainPost, bad_field, comment_fields, direct_image, harvest_invariant, image_urls,
                                        plain_gallery_urls, post_fields, record_id)
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import table_schema

VERSION = "4"  # 4: only kept comments are remembered for the duplicate rule

MAX_WINDOW = 2**31  # pushshift dumps are compressed with --long=31
CHUNK_SIZE = 1 << 16  # compressed bytes per read (see Speed)
_SUBMISSIONS = re.compile(r"^(RS_\d{4}-\d{2}|.+_submissions)\.zst$")
_COMMENTS = re.compile(r"^(RC_\d{4}-\d{2}|.+_comments)\.zst$")

COMMENT_CHUNK_SIZE = 1 << 18  # the comment reader's compressed bytes per chunk: fewer, larger messages
READ_AHEAD = 64  # joined comment chunks the comment reader may run ahead of this process
PENDING_TEXT = 128 << 20  # comment text the reader judges before the kept posts are known; then it waits for them (see Speed)
REJECTS = pa.schema([("id", pa.string()), ("reason", pa.string()), ("detail", pa.string())])
COMMENTS = table_schema("reddit_comments")
# a judged comment chunk: the comment columns, and a reject's reason and detail (reason null: waiting for its post)
JUDGED = pa.schema([*COMMENTS, pa.field("reason", pa.string()), pa.field("detail", pa.string())])
_NO_TEXT = pa.scalar(None, pa.string())


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


def read_zstd_chunks(path: str, chunk_size: int = CHUNK_SIZE, progress: tqdm | None = None) -> Iterator[bytes]:
    """Yield, per compressed chunk read of a (multi-frame) zstd file, the text of the whole lines
    that end in it, without their last newline; raise TruncatedFrame after the last complete line
    if the file ends mid-frame (the partial last line is yielded, so it becomes a bad_json reject
    rather than vanishing)."""
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
            end = text.rfind(b"\n")
            if end < 0:
                tail = text
                continue
            tail = text[end + 1 :]
            yield text[:end]
    if tail:
        yield tail
    if in_frame:
        raise TruncatedFrame(f"{path} ends inside a zstd frame")


def split_lines(text: bytes) -> list[bytes]:
    """The records of a chunk: its lines, blank ones left out."""
    return [line for line in text.split(b"\n") if line and not line.isspace()]


def read_zstd_lines(path: str, chunk_size: int = CHUNK_SIZE, progress: tqdm | None = None) -> Iterator[bytes]:
    """The non-blank lines of a dump, one at a time."""
    for text in read_zstd_chunks(path, chunk_size, progress):
        yield from split_lines(text)


class _ShardRows:
    """Kept rows of one table per shard, in reading order: tuples (columns in schema order) or
    Arrow tables. Written as Arrow tables of exactly the shard writer's batch size: the same row
    groups, so the same files, as row-by-row writes. A write runs in `pool` (Parquet encoding
    releases the GIL, so it overlaps the judging), one at a time per shard, in order."""

    def __init__(self, ctx, name: str, shards: int, pool: ThreadPoolExecutor):
        self.writers = [ctx.writer(name, i) for i in range(shards)]
        self.schema = self.writers[0].schema
        self.batch_rows = self.writers[0].batch_rows
        self.rows: list[list[tuple]] = [[] for _ in range(shards)]
        self.tables: list[list[pa.Table]] = [[] for _ in range(shards)]
        self.pool = pool
        self.writing: list[Future | None] = [None] * shards

    def add(self, shard: int, table: pa.Table) -> None:
        """Rows of one shard as a table, behind the rows gathered before them."""
        self._seal(shard)
        if table.num_rows:
            self.tables[shard].append(table)

    def _seal(self, shard: int) -> None:
        """The shard's tuples as one table, behind the tables gathered before them."""
        if self.rows[shard]:
            columns = zip(*self.rows[shard])
            arrays = [pa.array(values, type=field.type) for values, field in zip(columns, self.schema)]
            self.tables[shard].append(pa.Table.from_arrays(arrays, schema=self.schema))
            self.rows[shard] = []

    def flush(self, final: bool = False) -> None:
        """Write every full batch (and, when `final`, what is left: no row may follow)."""
        size = self.batch_rows
        for shard, tables in enumerate(self.tables):
            self._seal(shard)
            held = sum(table.num_rows for table in tables)
            done = held if final else held - held % size
            if done:
                table = pa.concat_tables(tables)
                batches = [table.slice(start, min(size, done - start)).combine_chunks() for start in range(0, done, size)]
                self._write(shard, batches)
                tables[:] = [table.slice(done)] if done < held else []

    def wait(self) -> None:
        """Until every write is done (an error in one is raised here)."""
        for writing in self.writing:
            if writing is not None:
                writing.result()

    def _write(self, shard: int, batches: list[pa.Table]) -> None:
        if self.writing[shard] is not None:
            self.writing[shard].result()  # the shard's previous batch first (and its error, if any)
        writer = self.writers[shard]
        self.writing[shard] = self.pool.submit(lambda: [writer.write_many(batch) for batch in batches])


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
_NEWLINE = ord("\n")
_SPACE = np.zeros(256, bool)  # the bytes that open a blank or indented line
_SPACE[list(b" \t\n\r\x0b\x0c")] = True


def plain_records(decode_lines, text: bytes, utf8: bool) -> list | None:
    """Every line of a chunk as a plain record, decoded in one `decode_lines` call, when each line
    is one: no line starts with white space (so none is blank), the records are as many as the
    lines (so no line holds two) and the chunk is UTF-8 throughout (`utf8`). None otherwise."""
    if not utf8 or not text:
        return None
    data = np.frombuffer(text, np.uint8)
    breaks = np.flatnonzero(data == _NEWLINE)
    if _SPACE[data[0]] or data[-1] == _NEWLINE or _SPACE[data[breaks + 1]].any():
        return None
    try:
        records = decode_lines(text)
    except _NOT_PLAIN:
        return None
    return records if len(records) == len(breaks) + 1 else None


class _Harvest:
    """The post rules, with the state they share across dumps (the kept posts), and every write.
    The comments arrive judged and joined from the comment reader process."""

    def __init__(self, ctx, writes: ThreadPoolExecutor, progress: tqdm):
        params = ctx.params
        self.ctx = ctx
        self.progress = progress
        self.subreddit_domain = {sub.lower(): domain for domain, subs in params["domains"].items() for sub in subs}
        self.extensions = tuple(e.lower() for e in params["image_extensions"])
        self.include_nsfw = params["include_nsfw"]
        self.configured = {sub.encode() for sub in self.subreddit_domain}
        self.shards = len(ctx.output_paths("posts"))
        self.posts = _ShardRows(ctx, "posts", self.shards, writes)
        self.comments = _ShardRows(ctx, "comments", self.shards, writes)
        self.kept_posts: dict[str, int] = {}  # post id -> shard
        self.item: str | None = None  # id of the post being judged, once it is known
        self.reject_ids: list[str] = []  # rejects judged here, in reading order
        self.reject_reasons: list[str] = []
        self.reject_details: list[str] = []
        self.reject_batches: list[tuple] = []  # rejects not yet written, as (ids, reasons, details) arrays
        self.gallery_items_dropped = 0
        decoder = msgspec.json.Decoder(PlainPost)
        self.decode_post, self.decode_posts = decoder.decode, decoder.decode_lines

    def reject(self, item_id: str, reason: str, detail: str) -> None:
        self.reject_ids.append(item_id)
        self.reject_reasons.append(reason)
        self.reject_details.append(detail)

    def reject_columns(self, ids: pa.Array, reasons: pa.Array, details: pa.Array) -> None:
        """Rejects as arrays, behind those gathered before them."""
        self._seal_rejects()
        self.reject_batches.append((ids, reasons, details))

    def _seal_rejects(self) -> None:
        if self.reject_ids:
            self.reject_batches.append(tuple(pa.array(c, pa.string()) for c in (self.reject_ids, self.reject_reasons, self.reject_details)))
            self.reject_ids, self.reject_reasons, self.reject_details = [], [], []

    def flush(self, dump_end: bool = False) -> None:
        """Write every full batch of kept rows, and the rejects gathered once they fill a batch of
        the writers' size or a dump ends."""
        held = len(self.reject_ids) + sum(len(batch[0]) for batch in self.reject_batches)
        if held and (dump_end or held >= self.posts.batch_rows):
            self._seal_rejects()
            self.ctx.reject_many(*(pa.concat_arrays(column) for column in zip(*self.reject_batches)))
            self.reject_batches = []
        self.posts.flush()
        self.comments.flush()

    # posts ------------------------------------------------------------------------------
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

    def plain_submission(self, post: PlainPost) -> tuple[str, str] | None:
        """`submission` for a post of plain types (no field check left): None when it is kept,
        else (reason, detail). Returned, not raised: most posts of a dump are rejected here."""
        post_id = post.id
        if post_id in self.kept_posts:
            return "duplicate", "post seen in an earlier dump"
        subreddit = post.subreddit
        domain = self.subreddit_domain.get(subreddit.lower())
        if domain is None:
            return "subreddit_not_configured", subreddit
        if post.over_18 and not self.include_nsfw:
            return "nsfw", subreddit
        dropped: list[tuple[str, str, str]] = []
        if post.is_gallery:
            urls = plain_gallery_urls(post, dropped)
            if not urls:
                return "gallery_without_valid_images", post.url[:300]
        else:
            url = direct_image(post.url, self.extensions)
            if url is None:
                return "no_image", post.url[:300]
            urls = [url]
        self.keep(post_id, (post_id, subreddit, domain, post.title, post.selftext, post.url, urls, post.is_gallery, post.author,
                            post.created_utc, post.score, post.num_comments, post.over_18, post.permalink), dropped)
        return None

    def keep(self, post_id: str, row: tuple, dropped: list[tuple[str, str, str]]) -> None:
        """Keep a post (its row without the id column); its dropped gallery items become rejects."""
        item_id = "reddit:" + post_id
        for media_id, reason, detail in dropped:
            self.reject(f"{item_id}:{media_id}", reason, detail)
        self.gallery_items_dropped += len(dropped)
        shard = shard_of(item_id, self.shards)
        self.kept_posts[post_id] = shard
        self.posts.rows[shard].append((item_id, *row))

    def judge_plain(self, posts: list[PlainPost]) -> None:
        """A chunk of plain posts through `plain_submission`."""
        reject, plain_submission = self.reject, self.plain_submission
        for post in posts:
            verdict = plain_submission(post)
            if verdict is not None:
                reject("reddit:" + post.id, *verdict)

    def read_submissions(self, lines: list[bytes], name: str, line_no: int, plain: bool) -> None:
        loads, reject, out_of_scope, configured = orjson.loads, self.reject, self.out_of_scope, self.configured
        decode, plain_submission = self.decode_post, self.plain_submission
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
            if plain:
                try:
                    post = decode(line)
                except _NOT_PLAIN:
                    pass
                else:
                    verdict = plain_submission(post)
                    if verdict is not None:
                        reject("reddit:" + post.id, *verdict)
                    continue
            self.item = None
            try:
                self.submission(loads(line))
            except orjson.JSONDecodeError as err:
                reject(f"{name}:{line_no}", "bad_json", str(err))
            except Reject as rejected:
                reject(self.item or f"{name}:{line_no}", rejected.reason, rejected.detail)

    def read_posts(self, path: str) -> None:
        """Every line of one submissions dump through the post rules."""
        ctx, name, line_no = self.ctx, Path(path).name, 0
        try:
            for text in read_zstd_chunks(path, progress=self.progress):
                utf8 = _valid_utf8(text)
                posts = plain_records(self.decode_posts, text, utf8)
                if posts is not None:
                    ctx.add_input(len(posts))
                    self.judge_plain(posts)
                    line_no += len(posts)
                else:
                    lines = split_lines(text)
                    ctx.add_input(len(lines))
                    self.read_submissions(lines, name, line_no, utf8)
                    line_no += len(lines)
                self.flush()
        except TruncatedFrame as err:
            ctx.add_input()
            self.reject(f"{name}:{line_no + 1}", "truncated_frame", str(err))
        except zstandard.ZstdError as err:
            raise StageError(f"{path}: not a readable zstd file ({err})") from None
        self.flush(dump_end=True)

    # comments ---------------------------------------------------------------------------
    def take_comments(self, reader: ForkedGenerator) -> None:
        """Take the comments the comment reader judged and joined (once it has the kept posts),
        chunk by chunk, in reading order."""
        for message in reader.items():
            kind = message[0]
            if kind == "chunk":
                _, lines, read_bytes, shards, rejects = message
                self.ctx.add_input(lines)
                self.progress.update(read_bytes)
                for shard, rows in enumerate(shards):
                    self.comments.add(shard, pa.Table.from_batches([pa.ipc.read_record_batch(rows, self.comments.schema)]))
                rejects = pa.ipc.read_record_batch(rejects, REJECTS)
                if rejects.num_rows:
                    self.reject_columns(*rejects.columns)
                self.flush()
            elif kind == "dump_end":
                self.flush(dump_end=True)
            else:
                raise StageError(message[1])


class _CommentRules:
    """The comment rules, run by the comment reader process. `judge` applies those that need no
    post (the checks, not_top_level) as soon as a chunk is read; `join` the others (post_not_kept,
    then duplicate, or the post's shard) once the kept posts are known. As for posts, only kept
    comments are remembered: a repeat of a kept comment is a duplicate, a repeat of a rejected one
    is judged afresh. A monthly dump holds hundreds of millions of comments, few of them kept."""

    def __init__(self, shards: int):
        self.shards = shards
        self.kept: set[str] = set()  # the post_id-style items (reddit:<id>) of the comments kept so far
        decoder = msgspec.json.Decoder(PlainComment)
        self.decode, self.decode_lines = decoder.decode, decoder.decode_lines

    def plain(self, line: bytes) -> PlainComment | None:
        try:
            return self.decode(line)
        except _NOT_PLAIN:
            return None

    def judge(self, text: bytes, name: str, before: int) -> tuple[pa.Table, int]:
        """The verdicts of one chunk (`verdicts`) and its record count (`before`: the dump's
        records before it). A chunk of plain records is decoded at once and judged column by
        column; in any other chunk each line is decoded as a plain record or, failing that,
        parsed and checked (`comment_fields`), which names its defect."""
        utf8 = _valid_utf8(text)
        records = plain_records(self.decode_lines, text, utf8)
        if records is not None:
            columns = [[record.id for record in records], [record.link_id for record in records],
                       [record.parent_id for record in records], [record.body for record in records],
                       [record.score for record in records], [record.author for record in records],
                       [record.created_utc for record in records]]
            return self.verdicts(*columns), len(records)
        lines = split_lines(text)
        columns = [[] for _ in range(7)]  # id, link_id, parent_id, body, score, author, created_utc
        failures: dict[int, tuple[str, str, str]] = {}  # index -> (item, reason, detail) of a line that fails its checks
        for index, line in enumerate(lines):
            record = self.plain(line) if utf8 else None
            if record is not None:
                fields = (record.id, record.link_id, record.parent_id, record.body, record.score, record.author, record.created_utc)
            else:
                line_no = before + index + 1
                try:
                    record = orjson.loads(line)
                    fields = comment_fields(record)
                except orjson.JSONDecodeError as err:
                    failures[index], fields = (f"{name}:{line_no}", "bad_json", str(err)), (None,) * 7
                except Reject as rejected:
                    valid_id = type(record) is dict and type(record.get("id")) is str and record.get("id")
                    item = f"reddit:{record['id']}" if valid_id else f"{name}:{line_no}"
                    failures[index], fields = (item, rejected.reason, rejected.detail), (None,) * 7
            for column, value in zip(columns, fields):
                column.append(value)
        return self.verdicts(*columns, failures=failures), len(lines)

    def verdicts(self, ids: list, link_ids: list, parent_ids: list, bodies: list, scores: list, authors: list, created: list,
                 failures: dict[int, tuple[str, str, str]] | None = None) -> pa.Table:
        """One row per record, in line order (JUDGED): a reject (`failures` first, then
        not_top_level) or a comment waiting for its post (reason null, detail its link_id for a
        post_not_kept reject)."""
        ids_array = pa.array(ids, pa.string())
        links, parents = pa.array(link_ids, pa.string()), pa.array(parent_ids, pa.string())
        top_level = pc.starts_with(parents, "t3_")
        reason = pc.if_else(top_level, _NO_TEXT, "not_top_level")
        detail = pc.if_else(top_level, links, parents)
        item = pc.binary_join_element_wise("reddit:", ids_array, "")
        if failures:
            failed = [failures.get(index, (None, None, None)) for index in range(len(ids))]
            item, reason, detail = (pc.coalesce(pa.array(column, pa.string()), ours)
                                    for column, ours in zip(zip(*failed), (item, reason, detail)))
        to_post = pc.starts_with(links, "t3_")
        post_id = pc.binary_join_element_wise("reddit:", pc.if_else(to_post, pc.utf8_slice_codeunits(links, 3), links), "")
        return pa.Table.from_arrays([item, post_id, pa.array(bodies, pa.string()), pa.array(scores, pa.int64()),
                                     pa.array(authors, pa.string()), pa.array(created, pa.int64()), reason, detail], schema=JUDGED)

    def repeated(self, items: list[str]) -> np.ndarray | None:
        """Which of a chunk's would-be kept comments repeat one kept before (in an earlier chunk
        or earlier in this one), None when none does; the others join `kept`. Repeats are rare:
        two set operations settle most chunks."""
        kept = self.kept
        if kept.isdisjoint(items):
            before = len(kept)
            kept.update(items)
            if len(kept) - before == len(items):
                return None
            kept.difference_update(items)  # an id repeats within the chunk: back to `kept` before it, then in order
        flags = np.zeros(len(items), bool)
        for index, item in enumerate(items):
            flags[index] = item in kept
            kept.add(item)
        return flags

    def join(self, kept_posts: dict[str, int], judged: pa.Table) -> tuple[list[bytes], bytes]:
        """A judged chunk's kept comments per shard, and all its rejects in reading order, as
        Arrow IPC: a waiting comment goes to its post's shard, or is rejected as post_not_kept.
        `kept_posts` is keyed by the post_id column's value (`reddit:<post id>`)."""
        shard = pa.array([kept_posts.get(post_id) for post_id in judged["post_id"].to_pylist()], pa.int64())
        waiting = judged["reason"].is_null()
        reason = pc.if_else(pc.and_(waiting, shard.is_null()), "post_not_kept", judged["reason"])
        detail = judged["detail"]
        kept = reason.is_null()
        kept_rows = np.flatnonzero(kept.to_numpy(zero_copy_only=False))
        repeated = self.repeated(judged["id"].take(kept_rows).to_pylist()) if len(kept_rows) else None
        if repeated is not None:
            duplicate = np.zeros(len(judged), bool)
            duplicate[kept_rows[repeated]] = True
            reason = pc.if_else(duplicate, "duplicate", reason)
            detail = pc.if_else(duplicate, "comment seen before (the first is kept)", detail)
            kept = reason.is_null()
        rows = pa.Table.from_arrays([judged[field.name] for field in COMMENTS], schema=COMMENTS).filter(kept)
        shard = shard.filter(kept)
        per_shard = [_ipc(rows.filter(pc.equal(shard, number))) for number in range(self.shards)]
        rejected = pc.invert(kept)
        rejects = pa.Table.from_arrays([judged["id"].filter(rejected), reason.filter(rejected), detail.filter(rejected)],
                                       schema=REJECTS)
        return per_shard, _ipc(rejects)


def judged_comments(paths: list[str], shards: int, receive) -> Iterator[tuple]:
    """Every comments dump through `_CommentRules`, in order, as messages (run by the comment
    reader process, which `receive`s the kept posts once every post is judged): ("chunk", lines,
    compressed bytes read, kept rows per shard, rejects) with the rows and rejects as Arrow IPC, a
    truncated dump's end being a chunk of one reject; ("dump_end",); ("error", message) for an
    unreadable dump, which ends the reading. Chunks judged before the kept posts arrive wait, up
    to PENDING_TEXT of their text; then the reading waits for the kept posts."""
    rules, counted = _CommentRules(shards), _Counted()
    kept_posts: dict[str, int] | None = None  # "reddit:<post id>" -> shard, once received
    held: list[tuple] = []  # judged chunks and dump ends waiting for the kept posts
    held_text = 0

    def take_kept_posts(block: bool) -> dict[str, int] | None:
        posts = receive(block)
        return None if posts is None else {"reddit:" + post_id: shard for post_id, shard in posts.items()}

    def release() -> Iterator[tuple]:
        nonlocal held, held_text
        for message in held:
            yield message if message[0] != "judged" else ("chunk", *message[1:3], *rules.join(kept_posts, message[3]))
        held, held_text = [], 0

    for path in paths:
        name, line_no = Path(path).name, 0
        try:
            for text in read_zstd_chunks(path, COMMENT_CHUNK_SIZE, counted):
                judged, count = rules.judge(text, name, line_no)
                if not count:
                    continue
                held.append(("judged", count, counted.take(), judged))
                held_text += len(text)
                line_no += count
                if kept_posts is None:
                    kept_posts = take_kept_posts(held_text > PENDING_TEXT)
                if kept_posts is not None:
                    yield from release()
        except TruncatedFrame as err:
            truncated = [[f"{name}:{line_no + 1}"], *[[None]] * 5, ["truncated_frame"], [str(err)]]
            held.append(("judged", 1, counted.take(), pa.table(truncated, schema=JUDGED)))
        except zstandard.ZstdError as err:
            yield ("error", f"{path}: not a readable zstd file ({err})")
            return
        held.append(("dump_end",))
    if kept_posts is None:
        kept_posts = take_kept_posts(True)
    yield from release()


class _Counted:
    """A progress sink that only counts bytes, for the process without a bar."""

    def __init__(self):
        self.n = 0

    def update(self, n: int) -> None:
        self.n += n

    def take(self) -> int:
        n, self.n = self.n, 0
        return n


def _ipc(table: pa.Table) -> bytes:
    """A table as one Arrow IPC record batch."""
    arrays = [column.combine_chunks() for column in table.columns]
    return pa.RecordBatch.from_arrays(arrays, schema=table.schema).serialize().to_pybytes()


def run(ctx):
    n_shards = len(ctx.output_paths("posts"))
    if len(ctx.output_paths("comments")) != n_shards:
        raise StageError("posts and comments need the same number of shard outputs")
    files = ctx.input_paths("dumps")
    kinds = {path: dump_kind(path) for path in files}
    for path in files:
        if os.path.getsize(path) == 0:
            raise StageError(f"{path}: empty file, not a zstd dump")
    comment_dumps = [p for p in files if kinds[p] == "comments"]
    # Each line allocates a parsed record that holds no cycle; the kept rows pile up. The cyclic
    # collector's passes over that growing heap cost a third of the reading, and free nothing.
    collecting = gc.isenabled()
    gc.disable()
    # forked before any writer or thread starts (see Speed)
    reader = ForkedGenerator(lambda receive: judged_comments(comment_dumps, n_shards, receive), READ_AHEAD, "harvest_pushshift comment reader")
    writes = ThreadPoolExecutor(2, thread_name_prefix="harvest_pushshift write")
    try:
        with tqdm(total=sum(os.path.getsize(p) for p in files), unit="B", unit_scale=True, desc="harvest_pushshift", mininterval=2) as bar:
            harvest = _Harvest(ctx, writes, bar)
            for path in files:
                if kinds[path] == "submissions":
                    harvest.read_posts(path)
            reader.send(harvest.kept_posts)  # every post is judged: the comment reader can join
            harvest.posts.flush(final=True)  # and the posts' last writes overlap its joins
            harvest.take_comments(reader)
            harvest.comments.flush(final=True)
            harvest.posts.wait()
            harvest.comments.wait()
    finally:
        writes.shutdown(cancel_futures=True)
        reader.close()
        if collecting:
            gc.enable()
    ctx.stats["kept_posts"] = len(harvest.kept_posts)
    ctx.stats["gallery_items_dropped"] = harvest.gallery_items_dropped


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
    invariant=harvest_invariant,
    rejects={
        **REDDIT_REJECTS,
        "bad_json": "the line is not JSON (or not UTF-8)",
        "duplicate": "a post or comment id kept before (a repeat of a rejected one is judged afresh)",
        "subreddit_not_configured": "the post's subreddit is not in the domains mapping",
        "nsfw": "an NSFW post (include_nsfw is false)",
        "not_top_level": "a comment that answers another comment, not the post",
        "post_not_kept": "a comment under a post that was not kept",
        "truncated_frame": "the dump file ends mid-frame (after its readable lines)",
    },
)

if __name__ == "__main__":
    STAGE.main()
