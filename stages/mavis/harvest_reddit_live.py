"""Harvest Reddit image posts and their top-level comments live from the Reddit API, with praw.

MAVIS §3.2 Step 1 ("Raw data"), the same posts as `harvest_pushshift` but read from the API instead
of dumps: for each configured subreddit (param `subreddits`, default every subreddit of the MAVIS
Table 11 mapping `domains`) the `new` listing is paged (`page_size` posts a page) from the newest
post back until a post older than `start`; posts created in [`start`, `end`) are judged. Reddit's
`new` listing reaches back about 1000 posts: a subreddit whose listing ends before a post older
than `start` is logged and named in the report (`stats.incomplete_window`), its window may be
incomplete.

Each post is checked by the same rules as the pushshift harvest (stages/mavis/reddit_records.py):
the same columns, the same reject reasons. Galleries keep `gallery_data` order with their
`media_metadata` urls; an item whose status is `failed`, or that has no metadata, is left out of
the gallery and recorded as a reject of its own (id `reddit:<post id>:<media id>`, reasons
gallery_item_failed, gallery_item_no_metadata) while the post is kept with its other images. A
kept post's comment tree is fetched, its "load more comments" stubs expanded with praw's
`replace_more(limit=replace_more_limit)` (stubs past the limit are dropped, counted in
`stats.more_comments_left`), and its top-level comments kept. Deleted and removed posts and
comments are what the API says they are, as in a dump: `[deleted]`/`[removed]` text, author
`[deleted]` (praw reads that author as None; it is written back as `[deleted]`), judged by the
same rules.

Credentials: the Reddit app's client id and secret are read from the environment variables
named by `client_id_env` and `client_secret_env` (a missing one fails the stage with one line
naming it; a replay needs none). Endpoints (`oauth_url`, `reddit_url`, `short_url`) are praw's
settings, so a mirror or a test server can stand in for Reddit.

Rate limits: praw's own handling (it spaces requests by Reddit's x-ratelimit headers) plus the
project's retry policy (stages/core/retry.py) on every HTTP exchange: 429, 5xx, timeouts and
resets retried `retry_attempts` times with backoff honouring Retry-After. A post whose comments
still cannot be fetched is the reject comments_unavailable; a listing page or the token that
cannot be fetched fails the stage, naming the subreddit. A body is read whole within the request's
timeout (`timeout_s`, for all of it: requests' own timeout only bounds the wait between two bytes,
so a server dripping a byte at a time is cut off, a timeout retried as any) and at most
MAX_ANSWER_BYTES after decoding (a gzip bomb is cut off): an answer past that is a bad answer,
not retried (a listing page fails the stage, a comment tree is its post's reject bad_answer).

Every answer is untrusted: the session checks a listing, comment tree or morechildren answer
against the shape praw reads (`ANSWERS`) before praw sees it. A listing page that is no listing
fails the stage naming the subreddit and the field; a post on it of another shape (praw would fail
on the whole page) is left out of what praw reads and is a reject bad_answer of its own, when it is
in the window or has no readable date (a page left with no post is followed by the next page in
its place, as praw ends a listing at an empty page); a comment tree of another shape is its post's
reject bad_answer. The records' fields are then judged by the harvest rules (bad_field_type...).

Record and replay (`mode`, as the fetch layer's): praw sends through a requests session that in
`record` writes every answer (after retries; a request that failed them as a failure record) to
the WARC file `warc` in the fetch layer's archive format (stages/core/fetch.py), and in `replay`
answers from that WARC with no network at all, so a live harvest rebuilds offline into identical
tables. A GET is stored under its url; a POST (morechildren) under its url with the form body
appended as query. The token exchange carries credentials and is never recorded (nor is a 401,
an expired token that praw renews before asking again); a replay answers it with a placeholder
token. Recorded rate-limit headers are not replayed (praw would
otherwise sleep as if the API were live).

Outputs, one file per shard (stable hash of the post id, comments sharded with their post):
`posts` (reddit_posts) and `comments` (reddit_comments).
Invariant: posts listed in the window + top-level comments of kept posts = posts + comments +
rejected - dropped gallery items (those rejects are parts of kept posts, not records).
Reject ids are `reddit:<id>` (`reddit:<post id>:<media id>` for a gallery item), or
`r/<sub>/new:<position>` for a post without a usable id (`r/<sub>/new:page<k>:<child>` for one left
out of what praw read).
Reject reasons: missing_field, bad_field_type, duplicate, subreddit_not_configured, nsfw,
no_image, gallery_without_valid_images, not_top_level, post_not_kept (the pushshift rules), and
comments_unavailable, bad_answer, gallery_item_failed, gallery_item_no_metadata.
"""
from __future__ import annotations

import collections
import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

import requests
from requests.structures import CaseInsensitiveDict

from stages.core.fetch import FetchError, WarcRecorder, load_archive
from stages.core.ids import shard_of
from stages.mavis.reddit_records import REDDIT_REJECTS, comment_fields, harvest_invariant, image_urls, int_field, post_fields, record_id
from stages.core.retry import BodyTooLarge, DeadlineAdapter, RetriesExhausted, RetryPolicy, read_body, with_retries
from stages.core.schema_check import answer_problem, read_json
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError

VERSION = "3"  # 2: a listed post of another shape is its own bad_answer, not the end of the harvest; 3: nor is a page of only such posts

log = logging.getLogger("citeforge")

TOKEN_PATH = "/api/v1/access_token"
# The most one answer may hold, decoded. Reddit's largest answers are a listing page of 100 posts
# (3-6 KB of JSON a post, a gallery's media_metadata some 30 KB: 3 MB at most) and a comment tree
# (praw asks for up to 2048 comments, Reddit sends at most 500 or so, 2-5 KB each: under 10 MB);
# 32 MiB leaves room past both while bounding what one answer can cost in memory.
MAX_ANSWER_BYTES = 32 << 20
DEFAULT_TIMEOUT_S = 30.0  # param timeout_s's default; a request sent without a timeout gets it for its body
_ISO_DATE = r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2})?(Z|[+-]\d{2}:\d{2})?)?$"


# --- the HTTP session praw sends through: retries, record, replay, the answers' shape ---------------
class NotInArchive(Exception):
    """A replayed request the WARC holds no answer for."""


class BadAnswer(Exception):
    """An API answer that is not of the shape praw reads (a listing whose children are numbers, a
    comment whose id is not a string): praw would fail on it with a TypeError deep inside."""


class AnswerTooLarge(BadAnswer):
    """An answer past MAX_ANSWER_BYTES (decoded); the rest of it is not read. Not retried; recorded
    as a failure (reason too_large), which a replay raises again."""


# What praw's objector needs of each answer it turns into objects (JSON Schema): a Listing of things
# {kind, data}; a post's or comment's id and subreddit non-empty strings (praw names the object by
# its id and builds a Subreddit of the subreddit); its author anything praw builds a Redditor of
# (null, false, 0, "", [] and {} make praw fail; a name that is not a string is then the rules'
# bad_field_type); a post's poll_data an object whose options are objects; a comment's post and
# parent strings and its replies "" or a Listing (praw walks the tree by them); a "more comments"
# stub's ids strings, its count an int (praw orders stubs by it) and its parent a string. The
# records' other fields (title, created_utc...) are the harvest's rules' business
# (stages/mavis/reddit_records.py): they reject a post or comment, not the answer.
_STR = {"type": "string"}
_NAME = {"type": "string", "minLength": 1}
_AUTHOR = {"not": {"enum": [None, False, 0, "", [], {}]}}
_REPLIES = {"anyOf": [{"const": ""}, {"type": "null"}, {"$ref": "#/$defs/listing"}]}
_POLL = {"type": ["object", "null"], "properties": {"options": {"type": ["array", "null"], "items": {"type": "object"}}}}
_THING = {
    "type": "object", "required": ["kind", "data"], "properties": {"kind": _STR, "data": {"type": "object"}},
    "allOf": [
        {"if": {"properties": {"kind": {"const": "t3"}}},
         "then": {"properties": {"data": {"required": ["id"], "properties": {
             "id": _NAME, "subreddit": _NAME, "author": _AUTHOR, "poll_data": _POLL}}}}},
        {"if": {"properties": {"kind": {"const": "t1"}}},
         "then": {"properties": {"data": {"required": ["id", "link_id", "parent_id", "replies"], "properties": {
             "id": _NAME, "link_id": _STR, "parent_id": _STR, "subreddit": _NAME, "author": _AUTHOR, "replies": _REPLIES}}}}},
        {"if": {"properties": {"kind": {"const": "more"}}},
         "then": {"properties": {"data": {"required": ["id", "children", "count", "parent_id"], "properties": {
             "id": _STR, "parent_id": _STR, "count": {"type": "integer"}, "children": {"type": "array", "items": _STR}}}}}},
    ],
}
_DEFS = {
    "listing": {"type": "object", "required": ["kind", "data"], "properties": {
        "kind": {"const": "Listing"},
        "data": {"type": "object", "required": ["children"], "properties": {
            "children": {"type": "array", "items": {"$ref": "#/$defs/thing"}}, "after": {"type": ["string", "null"]}}}}},
    "thing": _THING,
}
ANSWERS = {  # request path ending -> the answer's schema
    "/new": {"$defs": {**_DEFS, "thing": {}}, "$ref": "#/$defs/listing"},  # the page; its posts are checked one by one (LISTED_POST)
    "/comments": {"$defs": _DEFS, "type": "array", "minItems": 2, "prefixItems": [{"$ref": "#/$defs/listing"}] * 2},
    "/api/morechildren": {"$defs": _DEFS, "type": "object", "required": ["json"], "properties": {"json": {
        "type": "object", "properties": {"data": {"type": "object", "properties": {"things": {"type": "array", "items": {"$ref": "#/$defs/thing"}}}}}}}},
}
LISTED_POST = {"$defs": _DEFS, "$ref": "#/$defs/thing"}  # each child of a listing page


def check_answer(request: requests.PreparedRequest, status: int, body: bytes) -> tuple[bytes, list[tuple[int, object, str]]]:
    """(the body praw reads, the listing's children left out of it: (index, child, problem)).
    Raise BadAnswer when a 200 JSON answer to a listing, comment tree or morechildren request is
    not of the shape praw reads. A listing page's children are checked one by one: one of another
    shape is left out, so that one bad post does not cost the page. Anything else (an error
    status, a body that is not JSON) is left to praw, which has its own errors for those."""
    path = urlsplit(request.url).path.rstrip("/")
    kind = next((k for k in ("/new", "/api/morechildren") if path.endswith(k)), "/comments" if "/comments/" in path else None)
    if status != 200 or kind is None:
        return body, []
    try:
        answer = read_json(body)
    except ValueError:
        return body, []
    problem = answer_problem(ANSWERS[kind], answer)
    if problem:
        raise BadAnswer(f"{request.method} {path}: the answer is not of the API's shape: {problem}")
    if kind != "/new":
        return body, []
    children = answer["data"]["children"]
    left_out = [(i, child, problem) for i, child in enumerate(children) if (problem := answer_problem(LISTED_POST, child))]
    if not left_out:
        return body, []
    dropped = {index for index, _, _ in left_out}
    answer["data"]["children"] = [child for i, child in enumerate(children) if i not in dropped]
    return json.dumps(answer).encode(), left_out


def emptied_page_after(request: requests.PreparedRequest, body: bytes) -> str | None:
    """The `after` of a listing page left with no post (every one was of another shape, so left
    out), when it names a page other than the one asked for; else None."""
    data = read_json(body)["data"]
    asked = parse_qs(urlsplit(request.url).query).get("after", [None])[0]
    after = data.get("after") if not data["children"] else None
    return after if after and after != asked else None


def body_deadline(timeout) -> float:
    """How long a body may take in all: the request's read timeout (param timeout_s, which the
    session sets on every request), DEFAULT_TIMEOUT_S for a request sent without one."""
    if isinstance(timeout, tuple):
        timeout = timeout[-1]
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
        return float(timeout)
    return DEFAULT_TIMEOUT_S


def read_answer(request: requests.PreparedRequest, response: requests.Response, timeout) -> None:
    """Read the body of `response` (sent with stream=True) within body_deadline(timeout) in all and
    at most MAX_ANSWER_BYTES (stages/core/retry.py read_body), naming the request in what it raises:
    requests.ReadTimeout or ConnectionError (retried) or AnswerTooLarge. A body read already is left
    as it is."""
    if response._content is not False:  # requests' own mark of a body not read yet
        return
    try:
        read_body(response, body_deadline(timeout), MAX_ANSWER_BYTES)
    except BodyTooLarge as err:
        raise AnswerTooLarge(f"{request.method} {request.url}: the answer is too large: {err}") from None
    except requests.exceptions.ReadTimeout as err:
        raise requests.exceptions.ReadTimeout(f"{request.method} {request.url}: {err}") from None


def exchange_key(request: requests.PreparedRequest) -> str:
    """What an exchange is recorded under and replayed from: the url, and for a request with a
    body (a form POST) the body appended as query."""
    body = request.body
    if not body:
        return request.url
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    return f"{request.url}{'&' if '?' in request.url else '?'}{body}"


class ArchiveSession(requests.Session):
    """The requests session praw's requestor uses. `live` and `record` send with the project's
    retry policy (record writes each final answer, or the failure, to the WARC); `replay` answers
    from the loaded archive and sends nothing. `timeout_s` (param timeout_s) is every request's
    timeout, the whole body's included: praw passes prawcore's own default (16 s) with each request
    whatever its `timeout` setting says; None keeps the request's."""

    def __init__(self, mode: str, policy: RetryPolicy, stats, recorder: WarcRecorder | None = None,
                 archive: dict | None = None, warc: str = "", timeout_s: float | None = None):
        super().__init__()
        for scheme in ("http://", "https://"):  # the headers, too, within the timeout in all
            self.mount(scheme, DeadlineAdapter())
        self.mode, self.policy, self.stats, self.timeout_s = mode, policy, stats, timeout_s
        self.recorder, self.archive, self.warc = recorder, archive or {}, warc
        self.pages: collections.Counter[str] = collections.Counter()  # listing path -> pages answered
        self.left_out: list[tuple[int, int, object, str]] = []  # (page, index, child, problem) of posts praw did not get
        self.next_page: str | None = None  # the `after` to ask for in place of a page left with no post

    def checked(self, request: requests.PreparedRequest, response: requests.Response) -> requests.Response:
        """The response with the body praw may read (check_answer), the posts left out of it noted."""
        response._content, left_out = check_answer(request, response.status_code, response.content)
        path = urlsplit(request.url).path.rstrip("/")
        if path.endswith("/new") and response.status_code == 200:
            self.pages[path] += 1
            self.left_out += [(self.pages[path], index, child, problem) for index, child, problem in left_out]
            self.next_page = emptied_page_after(request, response.content) if left_out else None
        return response

    def send(self, request: requests.PreparedRequest, **kwargs) -> requests.Response:
        """One exchange; a listing page all of whose posts were left out is followed by the next
        page in its place (praw ends a listing at an empty page, which would end the harvest early)."""
        self.next_page = None
        response = self.exchange(request, **kwargs)
        followed: set[str] = set()  # an answer is untrusted: two empty pages naming each other end here
        while self.next_page is not None and self.next_page not in followed:
            followed.add(self.next_page)
            parts = urlsplit(request.url)
            query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "after"] + [("after", self.next_page)]
            request = request.copy()
            request.url = urlunsplit(parts._replace(query=urlencode(query)))
            self.next_page = None
            response = self.exchange(request, **kwargs)
        return response

    def resolve_redirects(self, resp, req, **kwargs):
        """requests.Session.send reads a redirect's body whole (unbounded) before following it or
        noting where it leads, and calls this for every answer: read it bounded first."""
        read_answer(req, resp, kwargs.get("timeout"))
        return super().resolve_redirects(resp, req, **kwargs)

    def take_left_out(self) -> list[tuple[int, int, object, str]]:
        taken, self.left_out = self.left_out, []
        return taken

    def exchange(self, request: requests.PreparedRequest, **kwargs) -> requests.Response:
        is_token = urlsplit(request.url).path.rstrip("/").endswith(TOKEN_PATH)
        key = exchange_key(request)
        if self.mode == "replay":
            return self._replay(request, key, is_token)
        if self.timeout_s is not None:
            kwargs["timeout"] = self.timeout_s

        def attempt() -> requests.Response:
            self.stats["requests"] = self.stats.get("requests", 0) + 1
            response = requests.Session.send(self, request, **{**kwargs, "stream": True})  # its body read bounded, by resolve_redirects
            read_answer(request, response, kwargs.get("timeout"))  # (a no-op then: here in case requests stops calling it)
            return response

        def on_retry(_attempt: int, why: str) -> None:
            self.stats["retries"] = self.stats.get("retries", 0) + 1
            log.info("retrying %s: %s", request.url, why)

        try:
            response = with_retries(attempt, self.policy, on_retry=on_retry)
        except RetriesExhausted as err:
            if self.recorder is not None and not is_token:
                reason = f"http_{err.last_status}" if err.last_status is not None else "connection_error"
                self.recorder.failure(key, FetchError(reason, str(err)))
            raise
        except AnswerTooLarge as err:
            if self.recorder is not None and not is_token:
                self.recorder.failure(key, FetchError("too_large", str(err)))
            raise
        # the token answer is a credential; a 401 is an expired token that praw renews and asks
        # again (recording it would answer the url with the 401 in a replay)
        if self.recorder is not None and not is_token and response.status_code != 401:
            self.recorder.response(key, response.status_code, response.reason or "", list(response.headers.items()), response.content)
        return self.checked(request, response)  # after recording: a replay reads the same

    def _replay(self, request: requests.PreparedRequest, key: str, is_token: bool) -> requests.Response:
        response = requests.Response()
        response.url, response.request = request.url, request
        if is_token:
            response.status_code, response.reason = 200, "OK"
            response.headers = CaseInsensitiveDict({"content-type": "application/json"})
            response._content = b'{"access_token": "replay", "token_type": "bearer", "expires_in": 86400, "scope": "*"}'
            return response
        recorded = self.archive.get(key)
        if recorded is None:
            raise NotInArchive(f"{key} is not in the replay WARC {self.warc}")
        self.stats["replayed"] = self.stats.get("replayed", 0) + 1
        if recorded.failure:
            reason, detail = recorded.failure
            if reason == "too_large":
                raise AnswerTooLarge(detail)
            raise RetriesExhausted(detail, int(reason[5:]) if reason.startswith("http_") else None)
        response.status_code, response.reason = recorded.status, ""
        response.headers = CaseInsensitiveDict({k: v for k, v in recorded.headers.items() if not k.startswith("x-ratelimit")})
        response._content = recorded.body
        return self.checked(request, response)


# --- praw -----------------------------------------------------------------------------------------
def _credentials(p: dict) -> tuple[str, str]:
    if p["mode"] == "replay":
        return "replay", "replay"  # a replay sends nothing: no credentials needed
    values = []
    for param, what in (("client_id_env", "client id"), ("client_secret_env", "client secret")):
        value = os.environ.get(p[param], "")
        if not value:
            raise StageError(f"environment variable {p[param]} (param {param}) is not set: it must hold the Reddit app's {what}")
        values.append(value)
    return values[0], values[1]


def reddit_client(p: dict, session: ArchiveSession):
    import praw  # imported here: --help and the DAG never need it

    client_id, client_secret = _credentials(p)
    return praw.Reddit(
        client_id=client_id, client_secret=client_secret, user_agent=p["user_agent"],
        oauth_url=p["oauth_url"].rstrip("/"), reddit_url=p["reddit_url"].rstrip("/"), short_url=p["short_url"].rstrip("/"),
        check_for_updates=False, timeout=p["timeout_s"], requestor_kwargs={"session": session},
    )


def as_record(thing) -> dict:
    """A praw Submission or Comment as the API's JSON object (the shape of a dump record): praw
    turns `author` into a Redditor (None for "[deleted]") and `subreddit` into a Subreddit."""
    record = {k: v for k, v in vars(thing).items() if not k.startswith("_")}
    if "author" in record:  # the name as the API gave it: a name that is not a string is the rules' bad_field_type
        record["author"] = "[deleted]" if record["author"] is None else getattr(record["author"], "name", record["author"])
    if "subreddit" in record:
        record["subreddit"] = getattr(record["subreddit"], "display_name", record["subreddit"])
    return record


def top_level_comments(submission, limit: int) -> tuple[list, int]:
    """The post's top-level comments after expanding "more comments" stubs, and how many stubs
    were left unexpanded past `limit`. Answers of the checked shape can still disagree with each
    other (a loaded comment whose parent is in no answer): praw stops on those with an assertion
    or a TypeError deep in its tree walk, which is the answer's fault: BadAnswer."""
    try:
        forest = submission.comments  # fetches the comment tree
        left = forest.replace_more(limit=limit)
    except (AssertionError, AttributeError, LookupError, TypeError, ValueError) as err:
        why = ("praw's consistency check failed (a loaded comment whose parent is in no answer)" if isinstance(err, AssertionError)
               else f"{type(err).__name__}: {err}")
        raise BadAnswer(f"the comment tree does not hold together: {why}") from None
    return list(forest), len(left)


def api_errors() -> tuple[type[BaseException], ...]:
    import praw.exceptions
    import prawcore.exceptions

    return prawcore.exceptions.PrawcoreException, praw.exceptions.PRAWException


def _epoch(name: str, value: str) -> int:
    """Seconds since the epoch of an ISO 8601 param (its pattern is checked already; the calendar is not)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as err:  # 2023-02-30, hour 25
        raise StageError(f"param {name} ({value}) is not a date: {err}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp())


# --- the harvest ----------------------------------------------------------------------------------
class _Harvest:
    def __init__(self, ctx, session: ArchiveSession, reddit):
        p = ctx.params
        self.ctx, self.session, self.reddit, self.p = ctx, session, reddit, p
        self.subreddit_domain = {sub.lower(): domain for domain, subs in p["domains"].items() for sub in subs}
        self.extensions = tuple(e.lower() for e in p["image_extensions"])
        self.shards = len(ctx.output_paths("posts"))
        self.start, self.end = _epoch("start", p["start"]), _epoch("end", p["end"])
        if self.end <= self.start:
            raise StageError(f"param end ({p['end']}) must be after start ({p['start']})")
        self.seen_posts: set[str] = set()
        self.seen_comments: set[str] = set()
        self.gallery_items_dropped = 0
        self.kept_posts = 0
        self.errors = api_errors()

    def subreddits(self) -> list[str]:
        names = self.p["subreddits"] or [sub for subs in self.p["domains"].values() for sub in subs]
        unknown = [name for name in names if name.lower() not in self.subreddit_domain]
        if unknown:
            raise StageError(f"param subreddits: {unknown} are in no domain of param domains (MAVIS Table 11)")
        return names

    def harvest(self, name: str) -> None:
        """Page r/<name>/new from the newest post until one older than `start`."""
        stats, cap = self.ctx.stats, self.p["max_posts_per_subreddit"]
        listing = self.reddit.subreddit(name).new(limit=None, request_limit=self.p["page_size"])
        judged, reached_start = 0, False
        try:
            for position, submission in enumerate(listing, 1):
                self.judge_left_out(name)  # the posts of the page just read that praw did not get
                record = as_record(submission)
                try:
                    created = int_field(record, "created_utc")
                except Reject:
                    created = self.start  # unreadable: judged in the window, where its check rejects it
                if created >= self.end:
                    stats["listed_after_window"] = stats.get("listed_after_window", 0) + 1
                    continue
                if created < self.start:
                    reached_start = True
                    break
                self.post(submission, record, f"r/{name}/new:{position}")
                judged += 1
                if cap and judged >= cap:
                    reached_start = True  # the cap, not the listing, ended it
                    break
        except self.errors + (RetriesExhausted, NotInArchive, BadAnswer) as err:
            cause = getattr(err, "original_exception", None) or err
            raise StageError(f"r/{name}: the listing could not be read: {type(cause).__name__}: {cause}") from None
        self.judge_left_out(name)
        if not reached_start:
            log.warning("r/%s: the listing ended before %s; the window may be incomplete", name, self.p["start"])
            stats.setdefault("incomplete_window", []).append(name)

    def judge_left_out(self, name: str) -> None:
        """Each post of a listing page that was of another shape than praw reads: a bad_answer
        reject when it is in the window or its date cannot be read, as the listed posts are judged
        (one past the window's start is where the listing stops: not judged)."""
        for page, index, child, problem in self.session.take_left_out():
            data = child.get("data") if isinstance(child, dict) else None
            data = data if isinstance(data, dict) else {}
            created, raw_id = data.get("created_utc"), data.get("id")
            if isinstance(created, (int, float)) and not isinstance(created, bool):
                if created >= self.end:
                    self.ctx.stats["listed_after_window"] = self.ctx.stats.get("listed_after_window", 0) + 1
                    continue
                if created < self.start:
                    continue
            usable = isinstance(raw_id, str) and raw_id and raw_id not in self.seen_posts
            with self.ctx.item(f"reddit:{raw_id}" if usable else f"r/{name}/new:page{page}:{index + 1}"):
                if usable:
                    self.seen_posts.add(raw_id)  # a later listing of it is a duplicate
                raise Reject("bad_answer", f"r/{name}/new page {page}, post {index + 1} is not of the API's shape: {problem}")

    def post(self, submission, record: dict, where: str) -> None:
        """One post in the window: the pushshift rules, then its top-level comments. `where`
        (listing and position) names a post without a usable id."""
        ctx = self.ctx
        raw_id = record.get("id")
        item_id = f"reddit:{raw_id}" if isinstance(raw_id, str) and raw_id else where
        kept = None
        with ctx.item(item_id):
            post_id = record_id(record, "subreddit")
            subreddit = record["subreddit"]
            if post_id in self.seen_posts:
                raise Reject("duplicate", "post listed earlier in this harvest")
            self.seen_posts.add(post_id)
            domain = self.subreddit_domain.get(subreddit.lower())
            if domain is None:
                raise Reject("subreddit_not_configured", subreddit)
            title, selftext, url, is_gallery, author, created, score, num_comments, over_18, permalink = post_fields(record)
            if over_18 and not self.p["include_nsfw"]:
                raise Reject("nsfw", subreddit)
            dropped: list[tuple[str, str, str]] = []
            urls, problem = image_urls(record, self.extensions, dropped)
            if problem:
                raise Reject(problem, url[:300])
            try:
                comments, left = top_level_comments(submission, self.p["replace_more_limit"])
            except self.errors + (RetriesExhausted, NotInArchive, BadAnswer) as err:
                cause = getattr(err, "original_exception", None) or err
                if isinstance(cause, BadAnswer):
                    raise Reject("bad_answer", str(cause)[:500]) from None
                raise Reject("comments_unavailable", f"{type(cause).__name__}: {cause}"[:500]) from None
            for media_id, reason, detail in dropped:
                ctx.reject(f"{item_id}:{media_id}", reason, detail)
                self.gallery_items_dropped += 1
            ctx.stats["more_comments_left"] = ctx.stats.get("more_comments_left", 0) + left
            shard = shard_of(item_id, self.shards)
            ctx.writer("posts", shard).write({
                "id": item_id, "post_id": post_id, "subreddit": subreddit, "domain": domain, "title": title, "selftext": selftext,
                "url": url, "image_urls": urls, "is_gallery": is_gallery, "author": author, "created_utc": created, "score": score,
                "num_comments": num_comments, "over_18": over_18, "permalink": permalink,
            })
            kept = post_id, shard, comments
            self.kept_posts += 1
        if kept:
            post_id, shard, comments = kept
            for comment in comments:
                self.comment(as_record(comment), post_id, shard)

    def comment(self, record: dict, post_id: str, shard: int) -> None:
        """One top-level comment of a kept post: the pushshift comment rules."""
        raw_id = record.get("id")
        with self.ctx.item(f"reddit:{raw_id}" if isinstance(raw_id, str) and raw_id else f"reddit:{post_id}:?"):
            comment_id, link_id, parent_id, body, score, author, created = comment_fields(record)
            if comment_id in self.seen_comments:
                raise Reject("duplicate", "comment seen earlier in this harvest")
            self.seen_comments.add(comment_id)
            if not parent_id.startswith("t3_"):
                raise Reject("not_top_level", parent_id)
            if link_id.removeprefix("t3_") != post_id:
                raise Reject("post_not_kept", link_id)
            self.ctx.writer("comments", shard).write({
                "id": f"reddit:{comment_id}", "post_id": f"reddit:{post_id}", "body": body, "score": score, "author": author,
                "created_utc": created,
            })


def _open_session(ctx) -> ArchiveSession:
    p = ctx.params
    policy = RetryPolicy(p["retry_attempts"], p["retry_backoff_s"], p["retry_max_sleep_s"])
    warc = ctx.input_path("replay") if p["mode"] == "replay" and ctx.has_input("replay") else p["warc"]
    if p["mode"] != "live" and not warc:
        raise StageError(f"mode {p['mode']} needs param 'warc', the WARC file it writes or reads")
    if p["mode"] == "replay":
        if not Path(warc).is_file():
            raise StageError(f"replay WARC {warc} does not exist (record it first with mode: record)")
        return ArchiveSession("replay", policy, ctx.stats, archive=load_archive((warc,)), warc=warc)
    recorder = WarcRecorder(warc) if p["mode"] == "record" else None
    return ArchiveSession(p["mode"], policy, ctx.stats, recorder=recorder, warc=warc, timeout_s=p["timeout_s"])


def run(ctx):
    if len(ctx.output_paths("comments")) != len(ctx.output_paths("posts")):
        raise StageError("posts and comments need the same number of shard outputs")
    session = _open_session(ctx)
    try:
        harvest = _Harvest(ctx, session, reddit_client(ctx.params, session))
        for name in harvest.subreddits():
            harvest.harvest(name)
    except BaseException:
        if session.recorder is not None:
            session.recorder.abort()
        raise
    finally:
        session.close()
    if session.recorder is not None:
        session.recorder.commit()
    ctx.stats["kept_posts"] = harvest.kept_posts
    ctx.stats["gallery_items_dropped"] = harvest.gallery_items_dropped


STAGE = Stage(
    name="harvest_reddit_live",
    version=VERSION,
    doc=__doc__,
    inputs={"replay": Input("the WARC mode replay answers from, instead of param warc (a rule lists it so that a new recording reruns the harvest)",
                            optional=True, kind="file")},
    outputs={
        "posts": Output("reddit_posts", "kept image posts, one file per shard", many=True),
        "comments": Output("reddit_comments", "top-level comments of kept posts, sharded with their post", many=True),
    },
    params={
        "domains": Param(dict, help="domain -> list of subreddits (MAVIS Table 11)", items=Param(list, items=str)),
        "subreddits": Param(list, [], "subreddits to harvest; empty: every subreddit in domains", items=str),
        "image_extensions": Param(list, [".jpg", ".jpeg", ".png", ".gif", ".webp"], "url path endings that count as a direct image", items=str),
        "include_nsfw": Param(bool, False, "keep posts marked over_18"),
        "start": Param(str, help="window start, ISO 8601 UTC (2023-01-01 or 2023-01-01T00:00:00Z): posts created at or after it", pattern=_ISO_DATE),
        "end": Param(str, help="window end, ISO 8601 UTC: posts created before it", pattern=_ISO_DATE),
        "page_size": Param(int, 100, "posts per listing page (the API allows up to 100)", min=1, max=100),
        "max_posts_per_subreddit": Param(int, 0, "stop a subreddit after this many posts in the window; 0 = all", min=0),
        "replace_more_limit": Param(int, 32, "\"more comments\" stubs expanded per post (one request each; praw's replace_more limit); 0 = none", min=0),
        "client_id_env": Param(str, "REDDIT_CLIENT_ID", "environment variable holding the Reddit app's client id"),
        "client_secret_env": Param(str, "REDDIT_CLIENT_SECRET", "environment variable holding the Reddit app's client secret"),
        "user_agent": Param(str, "python:citeforge:0.1 (MAVIS benchmark construction)", "User-Agent sent to Reddit (its API rules ask for a descriptive one)", min=7),
        "oauth_url": Param(str, "https://oauth.reddit.com", "praw's oauth_url: where API requests go"),
        "reddit_url": Param(str, "https://www.reddit.com", "praw's reddit_url: where the token is asked for"),
        "short_url": Param(str, "https://redd.it", "praw's short_url"),
        "mode": Param(str, "record", "live | record (write every API answer to `warc`) | replay (answer from `warc` only, no network)", choices=("live", "record", "replay")),
        "warc": Param(str, "data/cache/reddit/reddit_live.warc.gz", "the WARC file: record writes it, replay answers from it"),
        "retry_attempts": Param(int, 5, "tries per request on 429/5xx/timeouts, the first included", min=1),
        "retry_backoff_s": Param(float, 1.0, "first retry waits about this long, then doubles (Retry-After wins)", min=0),
        "retry_max_sleep_s": Param(float, 60.0, "longest wait between tries (caps Retry-After)", min=0),
        "timeout_s": Param(float, DEFAULT_TIMEOUT_S, "per-request timeout", above=0),
    },
    run=run,
    invariant=harvest_invariant,
    rejects={
        **REDDIT_REJECTS,
        "duplicate": "a post or comment listed earlier in this harvest",
        "subreddit_not_configured": "the post's subreddit is not in the domains mapping",
        "nsfw": "an NSFW post (include_nsfw is false)",
        "comments_unavailable": "the post's comments could not be fetched after the retries",
        "not_top_level": "a comment that answers another comment, not the post",
        "post_not_kept": "a comment whose link_id is not its post's",
        "bad_answer": "a listed post, or the post's comment tree or morechildren answer, is not of the shape praw reads",
    },
)

if __name__ == "__main__":
    STAGE.main()
