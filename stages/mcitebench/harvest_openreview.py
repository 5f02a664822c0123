"""Harvest a venue from the OpenReview API v2: papers, reviews, rebuttal threads and PDFs.

Seed: mcitebench.txt §3.2 (attribution corpus: ICLR 2025 submissions from OpenReview, with their
open reviews and the authors' responses) and §3.3 (review-rebuttal interactions become the
Explanation QA pairs: a reviewer's question and the authors' answers under it).

What it does:
- lists the submissions of a venue by invitation (`ICLR.cc/2025/Conference/-/Submission`) with
  `details=replies`, paging with offset/limit until the API's `count` is reached (without a
  `count`, until an empty page); a note listed again (the listing changed while paged) is kept
  once; a page of notes all listed before (a server ignoring `offset`), an empty page short of
  `count`, or a page of notes without ids with more to page fails the stage;
- unwraps API v2 content values (`content.title.value`), types every reply by the suffix of its
  invitation (`Official_Review`, `Official_Comment`, `Meta_Review`, `Decision`, `Withdrawal`...),
  and its author by its signature (`.../Submission{N}/Authors`, `.../Reviewer_xyz`, ...);
- rebuilds the reply trees from `replyto` (thread root and depth of every reply) and pairs each
  reviewer note (a review or a reviewer comment) with the authors' responses under it: the author
  replies whose nearest non-author ancestor is that reviewer note;
- fetches each PDF from `/pdf?id=<forum>` once, streamed and cut off past `max_pdf_bytes`, and
  stores it by content hash (`<pdf_store>/<sha[:2]>/<sha>.pdf`); papers carry the hash.

HTTP goes through the fetch layer (stages/core/fetch.py): optional login (user and password from
the environment variables named by params) for a token; 429 and 5xx retried with backoff honouring
Retry-After, a bounded request rate, the address guard, and a byte cap checked while streaming.
Modes are the fetch layer's: `record` (network; every API page and PDF, failures included, written
to the WARC file `warc`), `live` (network, nothing saved), `replay` (answers only from that WARC, no
network; a request missing from it is an error naming it). The demo replays
data/samples/openreview/openreview.warc.gz.

Outputs: papers (counted: submissions in = papers out + rejected), reviews, comments, threads.
Every answer is checked against the API's shape before it is read (JSON Schemas PAGE, NOTE, REPLY,
FIELDS below): a listing page of another shape fails the stage naming the request; a submission of
another shape (an id that is a number, a title that is an object, a reply without an id) is
rejected malformed_note naming the field.

Rejects: malformed_note (the note or its content is not of the API's shape: no id, no title...), withdrawn (when drop_withdrawn), pdf_unavailable
(the note names a PDF that could not be fetched), not_a_pdf (the PDF endpoint answered other bytes),
pdf_too_large (the PDF passed `max_pdf_bytes`; recorded, so a replay rejects it the same way).
"""
from __future__ import annotations

import json
import os
from urllib.parse import urlencode

from tqdm import tqdm

from stages.core.fetch import Fetcher, FetchError, FetchSettings
from stages.core.ids import content_id, sha256_hex
from stages.core.images import pdf_path
from stages.core.schema_check import answer_problem, read_json
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import atomic_write_bytes

VERSION = "2"
API_MAX_BYTES = 1 << 30  # no API page comes near it: the cap only stops a broken server from filling memory

# What the harvest reads of the API's answers (JSON Schema), checked before anything is read: a
# listing page of another shape fails the stage; a note of another shape is its malformed_note.
_STR, _OPT_STR = {"type": "string", "minLength": 1}, {"type": ["string", "null"]}
_OPT_INT = {"type": ["integer", "null"], "minimum": -(2**63), "maximum": 2**63 - 1}  # the tables' int64
_STRINGS = {"type": ["array", "null"], "items": {"type": "string"}}
PAGE = {"type": "object", "required": ["notes"],
        "properties": {"notes": {"type": "array"}, "count": {"type": "integer", "minimum": 0}}}
REPLY = {"type": "object", "required": ["id"], "properties": {
    "id": _STR, "replyto": _OPT_STR, "invitation": _OPT_STR, "invitations": _STRINGS, "signatures": _STRINGS,
    "content": {"type": ["object", "null"]}, "cdate": _OPT_INT,
}}
NOTE = {"type": "object", "required": ["id"], "properties": {
    "id": _STR, "forum": _OPT_STR, "number": _OPT_INT, "cdate": _OPT_INT, "invitation": _OPT_STR, "invitations": _STRINGS,
    "content": {"type": ["object", "null"]},
    "details": {"type": ["object", "null"], "properties": {"replies": {"type": ["array", "null"], "items": REPLY}}},
}}
FIELDS = {"type": "object", "required": ["title"], "properties": {  # a submission's content, unwrapped
    "title": _STR, "abstract": _OPT_STR, "venueid": _OPT_STR, "pdf": _OPT_STR,
    "keywords": {"type": ["string", "array", "null"], "items": {"type": "string"}},
}}


# --- the API client ---------------------------------------------------------------------------
def api_url(base_url: str, path: str, params: dict) -> str:
    """The URL of one GET, its query sorted: what a recording stores the answer under and a replay
    looks up, whatever order the caller named the params in."""
    return f"{base_url.rstrip('/')}{path}?{urlencode(sorted((k, str(v)) for k, v in params.items()))}"


class OpenReviewClient:
    """GET requests against API v2 through one Fetcher (live, record or replay)."""

    def __init__(self, base_url: str, fetcher: Fetcher, stats):
        self.base_url = base_url.rstrip("/")
        self.fetcher = fetcher
        self.stats = stats

    def login(self, user: str, password: str) -> None:
        try:
            answer = self.fetcher.post_json(self.base_url + "/login", {"id": user, "password": password})
        except FetchError as err:
            raise StageError(f"OpenReview login as {user!r} failed: {err}") from None
        try:
            token = _json(answer.body).get("token") if answer.status == 200 else None
        except ValueError:
            token = None
        if not token:
            raise StageError(f"OpenReview login as {user!r} failed: HTTP {answer.status} {answer.body[:200]!r}")
        self.fetcher.session.headers["Authorization"] = f"Bearer {token}"

    def get(self, path: str, params: dict, max_bytes: int | None = None) -> bytes:
        """The body of a 2xx answer; FetchError otherwise (reason too_large past `max_bytes`).
        A request the replay archive lacks is a StageError: the archive is not this harvest's."""
        try:
            return self.fetcher.fetch(api_url(self.base_url, path, params), max_bytes=max_bytes).body
        except FetchError as err:
            if err.reason == "not_in_archive":
                raise StageError(f"replay: GET {path}?{urlencode(params)}: {err}") from None
            raise

    def get_json(self, path: str, params: dict) -> dict:
        request = f"GET {path}?{urlencode(params)}"
        try:
            page = _json(self.get(path, params))
        except FetchError as err:
            raise StageError(f"OpenReview {request}: {err}") from None
        except ValueError as err:
            raise StageError(f"OpenReview {request}: the answer is not a JSON object ({err})") from None
        problem = answer_problem(PAGE, page)
        if problem:
            raise StageError(f"OpenReview {request}: the answer is not a page of notes: {problem}")
        return page


def _json(body: bytes) -> dict:
    value = read_json(body)
    if not isinstance(value, dict):
        raise ValueError(f"a JSON {type(value).__name__}")
    return value


def list_submissions(client: OpenReviewClient, invitation: str, page_size: int, max_papers: int) -> list[dict]:
    """Every submission of the invitation with its replies, page by page until `count` (or, from
    a server that leaves `count` out, until an empty page: a short page may only be the server's
    own cap on `limit`). A page of notes all listed before fails the stage: a server that ignores
    `offset` would otherwise be paged forever, each page held in memory."""
    notes: list[dict] = []
    seen: set[str] = set()
    offset = 0
    with tqdm(desc="submissions", unit="note") as bar:
        while True:
            limit = page_size if not max_papers else min(page_size, max_papers - offset)
            params = {"invitation": invitation, "details": "replies", "offset": offset, "limit": limit}
            page = client.get_json("/notes", params)
            client.stats["api_pages"] += 1
            batch = page["notes"]
            request = f"OpenReview GET /notes?{urlencode(params)}"
            # the string ids only: a note without one is rejected malformed_note after the listing
            ids = [n["id"] for n in batch if isinstance(n, dict) and isinstance(n.get("id"), str)]
            if ids and seen.issuperset(ids):
                raise StageError(f"{request}: every note of the page was listed before (the server ignores offset)")
            for note in batch:  # a listing that changed while paged shifts a note onto the next page: kept once
                note_id = note.get("id") if isinstance(note, dict) else None
                if isinstance(note_id, str):
                    if note_id in seen:
                        client.stats["notes_listed_twice"] += 1
                        continue
                    seen.add(note_id)
                notes.append(note)
            offset += len(batch)
            bar.update(len(batch))
            count = page.get("count")
            if max_papers and offset >= max_papers:
                return notes
            if not batch:
                if count is not None and offset < count:
                    raise StageError(f"{request}: an empty page at offset {offset} of a listing whose count is {count}")
                return notes
            if count is not None and offset >= count:
                return notes
            if not ids:  # nothing to tell a next page from this one by: a server ignoring offset would be paged forever
                raise StageError(f"{request}: a page of {len(batch)} notes without an id, and more to page")


# --- notes ------------------------------------------------------------------------------------
def unwrap(content: dict | None) -> dict:
    """API v2 wraps every content field as {"value": ...}; API v1 notes have bare values."""
    return {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in (content or {}).items()}


def reply_kind(note: dict) -> str:
    """The suffix of the note's invitation: `.../Submission12/-/Official_Review` -> Official_Review."""
    invitations = note.get("invitations") or ([note["invitation"]] if note.get("invitation") else [])
    for invitation in invitations:
        if "/-/" in invitation:
            return invitation.rsplit("/-/", 1)[1]
    return "unknown"


def signature_role(signature: str) -> str:
    last = signature.rsplit("/", 1)[-1]
    if last == "Authors":
        return "authors"
    if last.startswith("Reviewer"):
        return "reviewer"
    if last.startswith("Area_Chair") or last == "Senior_Area_Chairs":
        return "area_chair"
    if last == "Program_Chairs":
        return "program_chairs"
    return "other"


def note_text(fields: dict) -> str:
    """A comment's own text, or every field as "field: value" paragraphs (reviews, meta-reviews)."""
    if isinstance(fields.get("comment"), str):
        return fields["comment"]
    parts = []
    for key, value in fields.items():
        if value in (None, "", []):
            continue
        shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(f"{key}: {shown}")
    return "\n\n".join(parts)


def decision_of(fields: dict, replies: list[dict]) -> tuple[str | None, bool]:
    """(decision, withdrawn): withdrawn and desk-rejected venues first, then a Decision reply."""
    venueid = str(fields.get("venueid") or "")
    withdrawn = venueid.endswith("Withdrawn_Submission") or any(reply_kind(r) == "Withdrawal" for r in replies)
    if withdrawn:
        return "Withdrawn", True
    if venueid.endswith("Desk_Rejected_Submission"):
        return "Desk Rejected", False
    for reply in replies:
        if reply_kind(reply) == "Decision":
            decision = unwrap(reply.get("content")).get("decision")
            if decision:
                return str(decision), False
    return None, False


def as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value]


def reply_tree(forum: str, replies: list[dict], stats) -> dict[str, tuple[str, int]]:
    """note id -> (thread root, depth) from `replyto`; depth 1 is a direct reply to the submission.
    A reply whose parent is not among the replies (deleted, hidden) starts a thread of its own."""
    parent = {r["id"]: r.get("replyto") or forum for r in replies}
    placed: dict[str, tuple[str, int]] = {}
    for nid in parent:
        chain = []
        while nid not in placed:
            chain.append(nid)
            up = parent[nid]
            if up == forum:
                break
            if up not in parent or up in chain:
                stats["orphan_replies"] += 1
                break
            nid = up
        root, depth = placed[nid] if nid in placed else (chain[-1] if chain else nid, 0)
        for note_id in reversed(chain):
            depth += 1
            placed[note_id] = (root, depth)
    return placed


# --- the stage --------------------------------------------------------------------------------
def run(ctx) -> None:
    p = ctx.params
    with fetcher_for(ctx) as fetcher:
        client = OpenReviewClient(p["base_url"], fetcher, ctx.stats)
        user, password = os.environ.get(p["username_env"]), os.environ.get(p["password_env"])
        if user and password and p["mode"] != "replay":
            client.login(user, password)
        notes = list_submissions(client, p["invitation"], p["page_size"], p["max_papers"])
        wellformed = []
        for position, note in enumerate(notes):
            problem = answer_problem(NOTE, note)
            if problem:
                with ctx.item(_note_item(note, position)):
                    raise Reject("malformed_note", f"submission #{position} of the listing: {problem}")
            else:
                wellformed.append(note)
        for note in tqdm(sorted(wellformed, key=lambda n: (n.get("number") or 0, n["id"])), desc="papers", unit="paper"):
            with ctx.item(f"openreview:{note.get('forum') or note['id']}"):
                harvest_note(ctx, client, note)
    for key, value in fetcher.stats.items():
        ctx.stats[f"fetch_{key}"] = value


def _note_item(note, position: int) -> str:
    """A malformed note's reject id: its forum or id where that is a string, else its place in the listing."""
    named = [note.get(k) for k in ("forum", "id")] if isinstance(note, dict) else []
    return next((f"openreview:{v}" for v in named if isinstance(v, str) and v), f"openreview:#{position}")


def fetcher_for(ctx) -> Fetcher:
    """The stage's params as fetch settings: its mode, the WARC it records to or replays from."""
    p = ctx.params
    warc = ctx.input_paths("replay")[0] if p["mode"] == "replay" and ctx.has_input("replay") else p["warc"]
    if p["mode"] != "live" and not warc:
        raise StageError(f"mode {p['mode']} needs param 'warc', the WARC file it writes or reads")
    try:
        settings = FetchSettings.from_dict({
            "mode": p["mode"], "timeout_s": p["timeout_s"], "total_timeout_s": p["timeout_s"], "max_bytes": API_MAX_BYTES, "attempts": p["retry_attempts"],
            "max_retry_sleep_s": p["retry_max_sleep"], "per_host_concurrency": 1, "per_host_rate": p["requests_per_second"],
            "allow_networks": p["allow_networks"], "replay_warcs": [warc] if p["mode"] == "replay" else [],
        })
        return Fetcher(settings, record_to=warc if p["mode"] == "record" else None)
    except ValueError as err:
        raise StageError(f"fetch: {err}") from None


def harvest_note(ctx, client: OpenReviewClient, note: dict) -> None:
    """One submission's rows in every table, or Reject."""
    p = ctx.params
    fields = unwrap(note.get("content"))
    forum = note.get("forum") or note["id"]
    paper_id = f"openreview:{forum}"
    problem = answer_problem(FIELDS, fields)
    if problem:
        raise Reject("malformed_note", f"content (values unwrapped): {problem}")
    replies = (note.get("details") or {}).get("replies") or []
    decision, withdrawn = decision_of(fields, replies)
    if withdrawn and p["drop_withdrawn"]:
        raise Reject("withdrawn", str(fields.get("venueid")))
    pdf_sha = None
    if fields.get("pdf") and p["download_pdfs"]:
        try:
            data = client.get("/pdf", {"id": forum}, max_bytes=p["max_pdf_bytes"] or None)
        except FetchError as err:
            raise Reject("pdf_too_large" if err.reason == "too_large" else "pdf_unavailable", str(err)) from None
        if not data.startswith(b"%PDF"):
            raise Reject("not_a_pdf", f"/pdf?id={forum} answered {data[:40]!r}")
        pdf_sha = sha256_hex(data)
        target = pdf_path(p["pdf_store"], pdf_sha)
        if not target.exists():
            atomic_write_bytes(target, data)
        ctx.stats["pdfs"] += 1
    ctx.write("papers", [{
        "id": paper_id, "forum": forum, "number": note.get("number"), "title": str(fields["title"]),
        "abstract": fields.get("abstract"), "keywords": as_list(fields.get("keywords")),
        "venueid": fields.get("venueid"), "decision": decision, "withdrawn": withdrawn,
        "pdf_sha256": pdf_sha, "cdate": note.get("cdate"),
    }])
    write_replies(ctx, paper_id, forum, replies)


def write_replies(ctx, paper_id: str, forum: str, replies: list[dict]) -> None:
    tree = reply_tree(forum, replies, ctx.stats)
    by_id = {r["id"]: r for r in replies}
    role, text = {}, {}
    for reply in sorted(replies, key=lambda r: (r.get("cdate") or 0, r["id"])):
        nid, kind = reply["id"], reply_kind(reply)
        fields = unwrap(reply.get("content"))
        signature = (reply.get("signatures") or [""])[0]
        role[nid], text[nid] = signature_role(signature), note_text(fields)
        ctx.stats["replies"] += 1
        if kind == "Official_Review":
            ctx.write("reviews", [{
                "id": f"openreview:{nid}", "paper_id": paper_id, "note_id": nid, "signature": signature,
                "rating": _str(fields.get("rating")), "confidence": _str(fields.get("confidence")),
                "text": text[nid], "fields_json": json.dumps(fields, ensure_ascii=False), "cdate": reply.get("cdate"),
            }])
            continue
        root, depth = tree[nid]
        ctx.write("comments", [{
            "id": f"openreview:{nid}", "paper_id": paper_id, "note_id": nid, "replyto": reply.get("replyto") or forum,
            "thread_root": root, "depth": depth, "kind": kind, "role": role[nid], "signature": signature,
            "title": _str(fields.get("title")), "text": text[nid], "cdate": reply.get("cdate"),
        }])
    # Each author reply answers its nearest non-author ancestor; keep those that are reviewers'.
    answers: dict[str, list[dict]] = {}
    for reply in sorted(replies, key=lambda r: (r.get("cdate") or 0, r["id"])):
        if role[reply["id"]] != "authors":
            continue
        up, seen = reply.get("replyto"), {reply["id"]}
        while up in by_id and role[up] == "authors" and up not in seen:
            seen.add(up)
            up = by_id[up].get("replyto")
        if up in by_id and role[up] == "reviewer":
            answers.setdefault(up, []).append(reply)
    for question_id, responses in answers.items():
        question = by_id[question_id]
        ctx.write("threads", [{
            "id": content_id("thread", paper_id, question_id), "paper_id": paper_id, "question_note_id": question_id,
            "reviewer_signature": (question.get("signatures") or [""])[0], "question_text": text[question_id],
            "response_note_ids": [r["id"] for r in responses],
            "response_text": "\n\n".join(text[r["id"]] for r in responses),
        }])


def _str(value) -> str | None:
    return None if value is None else str(value)


STAGE = Stage(
    name="harvest_openreview",
    version=VERSION,
    doc=__doc__,
    inputs={"replay": Input("the WARC mode replay answers from, instead of param warc (a rule lists it so that a new recording reruns the harvest)", optional=True, kind="file")},
    outputs={
        "papers": Output("mcitebench_papers", "one row per submission"),
        "reviews": Output("mcitebench_reviews", "official reviews", counted=False),
        "comments": Output("mcitebench_comments", "every other reply, with thread root and depth", counted=False),
        "threads": Output("mcitebench_threads", "reviewer questions paired with the authors' responses", counted=False),
    },
    params={
        "base_url": Param(str, "https://api2.openreview.net", "API v2 base URL"),
        "invitation": Param(str, "ICLR.cc/2025/Conference/-/Submission", "the venue's submission invitation"),
        "mode": Param(str, "record", "live | record (write every API answer and PDF to `warc`) | replay (answer from `warc` only, no network)", choices=("live", "record", "replay")),
        "warc": Param(str, "data/cache/openreview/openreview.warc.gz", "the WARC file: record writes it, replay answers from it"),
        "pdf_store": Param(str, "data/cache/pdfs", "content-addressed PDF store root", folder="writes"),
        "page_size": Param(int, 200, "notes per API page (the API allows up to 1000)", min=1, max=1000),
        "max_papers": Param(int, 0, "stop after this many submissions; 0 = all", min=0),
        "download_pdfs": Param(bool, True, "fetch each submission's PDF"),
        "max_pdf_bytes": Param(int, 100_000_000, "largest PDF fetched, checked while streaming (a larger one is rejected pdf_too_large); 0 = the 1 GiB cap of every answer", min=0),
        "drop_withdrawn": Param(bool, False, "reject withdrawn submissions instead of keeping them"),
        "requests_per_second": Param(float, 1.0, "request rate bound per host", min=0),
        "retry_attempts": Param(int, 5, "tries per request on 429/5xx/timeouts", min=1),
        "retry_max_sleep": Param(float, 60.0, "longest wait between tries (caps Retry-After)", min=0),
        "timeout_s": Param(float, 60.0, "per-request timeout, also the bound on reading one whole answer", above=0),
        "allow_networks": Param(list, [], "CIDRs the fetch layer's address guard lets through (a local mirror, tests)", items=str),
        "username_env": Param(str, "OPENREVIEW_USERNAME", "environment variable holding the login (optional)"),
        "password_env": Param(str, "OPENREVIEW_PASSWORD", "environment variable holding the password (optional)"),
    },
    run=run,
    rejects={
        "malformed_note": "a submission without id, forum or title",
        "withdrawn": "a withdrawn submission (drop_withdrawn)",
        "pdf_unavailable": "the note names a PDF that could not be fetched",
        "pdf_too_large": "the PDF is larger than max_pdf_bytes",
        "not_a_pdf": "the PDF endpoint answered bytes that are no PDF",
    },
)

if __name__ == "__main__":
    STAGE.main()
