"""A 127.0.0.1 OpenReview API v2 for the harvest tests, on pytest-httpserver.

It speaks the slice of API v2 that harvest_openreview uses, in the API's own shapes:
- GET /notes?invitation=...&details=replies&offset=N&limit=M -> {"notes": [...], "count": total},
  each submission note carrying `details.replies`; content values wrapped as {"value": ...};
- POST /login {"id", "password"} -> {"token"}; with a token set, /notes and /pdf want
  `Authorization: Bearer <token>` and answer 403 without it;
- GET /pdf?id=<forum> -> application/pdf bytes, 404 for an unknown id.
`fail(path, status, headers)` queues failures served before the real answers (429 then success...).
"""
from __future__ import annotations

import json
from collections import deque

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

VENUE = "ICLR.cc/2025/Conference"
INVITATION = f"{VENUE}/-/Submission"


def wrap(fields: dict) -> dict:
    return {k: {"value": v} for k, v in fields.items()}


def submission(forum: str, number: int, title: str, *, pdf: bool = True, venueid: str = VENUE, replies: list[dict] | None = None) -> dict:
    fields = {
        "title": title, "abstract": f"Abstract of {title}.", "keywords": ["citations", "benchmarks"],
        "venueid": venueid, "venue": "ICLR 2025 Conference Submission", "authors": ["Anonymous"],
    }
    if pdf:
        fields["pdf"] = f"/pdf/{forum}.pdf"
    return {
        "id": forum, "forum": forum, "number": number, "cdate": 1727000000000 + number,
        "invitations": [INVITATION], "domain": VENUE, "signatures": [f"{VENUE}/Submission{number}/Authors"],
        "content": wrap(fields), "details": {"replies": replies or []},
    }


def reply(note_id: str, forum: str, number: int, kind: str, who: str, content: dict, *, replyto: str | None = None, cdate: int = 0) -> dict:
    """who: Authors | Reviewer_xxxx | Area_Chair_xxxx | Program_Chairs."""
    group = f"{VENUE}/Submission{number}"
    signature = f"{VENUE}/{who}" if who == "Program_Chairs" else f"{group}/{who}"
    return {
        "id": note_id, "forum": forum, "replyto": replyto or forum, "number": 1, "cdate": 1731000000000 + cdate,
        "invitations": [f"{group}/-/{kind}"], "signatures": [signature], "domain": VENUE,
        "readers": ["everyone"], "content": wrap(content),
    }


class FakeOpenReview:
    def __init__(self, server: HTTPServer, submissions: list[dict], pdfs: dict[str, bytes], token: str | None = None):
        self.server = server
        self.submissions = submissions
        self.pdfs = pdfs
        self.token = token
        self.failures: dict[str, deque] = {"/notes": deque(), "/pdf": deque(), "/login": deque()}
        self.requests: list[tuple[str, dict]] = []
        for path in self.failures:
            server.expect_request(path).respond_with_handler(self._handler(path))

    @property
    def url(self) -> str:
        return self.server.url_for("").rstrip("/")

    def fail(self, path: str, status: int, headers: dict | None = None, times: int = 1) -> None:
        for _ in range(times):
            self.failures[path].append((status, headers or {}))

    def _handler(self, path: str):
        def handle(request: Request) -> Response:
            self.requests.append((path, dict(request.args)))
            if self.failures[path]:
                status, headers = self.failures[path].popleft()
                return Response(json.dumps({"name": "Error", "status": status}), status=status, headers=headers, content_type="application/json")
            if path == "/login":
                return self._json({"token": self.token or "anonymous"})
            if self.token and request.headers.get("Authorization") != f"Bearer {self.token}":
                return self._json({"name": "ForbiddenError", "message": "login required"}, 403)
            if path == "/pdf":
                data = self.pdfs.get(request.args.get("id", ""))
                if data is None:
                    return self._json({"name": "NotFoundError", "message": "The Note was not found"}, 404)
                return Response(data, content_type="application/pdf")
            return self._notes(request)
        return handle

    def _notes(self, request: Request) -> Response:
        matching = [n for n in self.submissions if request.args.get("invitation") in n["invitations"]]
        offset, limit = int(request.args.get("offset", 0)), int(request.args.get("limit", 1000))
        page = [dict(n) for n in matching[offset : offset + limit]]
        if request.args.get("details") != "replies":
            for note in page:
                note.pop("details", None)
        return self._json({"notes": page, "count": len(matching)})

    @staticmethod
    def _json(body: dict, status: int = 200) -> Response:
        return Response(json.dumps(body), status=status, content_type="application/json")
