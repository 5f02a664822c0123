"""MinerU as a parsing service: the `mineru-api` server's lifecycle and its client.

`mineru_service(...)` yields the base URL of a running server for the duration of a block: a given
`server_url` (e.g. a GPU machine serving the model tiers), or `mineru-api` from the `mineru`
package started on a free 127.0.0.1 port with the configured tier, waited for on /v1/health, and
always stopped. `parse_pdf(url, pdf, ...)` POSTs one PDF to /v1/file_parse (tier, ocr_mode,
output_formats=zip) and returns the zip's `middle_json.json` and `images/*` crops; a PDF MinerU
cannot parse raises `Reject` (corrupt_pdf: MinerU cannot open it; mineru_failed: any other error,
a request that still fails after its retries (429, 5xx, a reset, a cut-short or stalled answer), a
redirect loop, an error answer, an unreadable zip or middle_json), so a stage
parsing inside `with ctx.item(...)` rejects that one paper and goes on. A server that does not
start is a StageError.
"""
from __future__ import annotations

import io
import os
import socket
import subprocess
import tempfile
import time
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pypdfium2
import requests

from stages.core.retry import RetriesExhausted, RetryPolicy, read_body, with_retries
from stages.core.stage import Reject, StageError
from stages.core.schema_check import read_json


# The reasons check_pdf and parse_pdf reject with.
MINERU_REJECTS = {
    "not_a_pdf": "the stored file is no PDF (empty, an HTML error page)",
    "encrypted_pdf": "the PDF needs a password",
    "corrupt_pdf": "PDFium, or MinerU, cannot open the PDF",
    "mineru_failed": "any other MinerU error: the request failed after its retries, an error answer, an unreadable zip or middle_json",
}


@contextmanager
def mineru_service(server_url: str, tier: str, mineru_home: str, startup_timeout: float) -> Iterator[str]:
    """The base URL of `server_url`, or of a `mineru-api` started for the block."""
    if server_url:
        yield server_url.rstrip("/")
        return
    with mineru_server(tier, mineru_home, startup_timeout) as url:
        yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def mineru_server(tier: str, mineru_home: str, timeout: float):
    """`mineru-api` on a free 127.0.0.1 port for the duration of the block; always stopped."""
    port = free_port()
    env = dict(os.environ)
    if mineru_home:
        env["MINERU_HOME"] = str(Path(mineru_home).resolve())
    with tempfile.TemporaryDirectory(prefix="mineru-") as tmp:
        log_path = Path(tmp) / "server.log"
        command = ["mineru-api", "--host", "127.0.0.1", "--port", str(port), "--tier", tier, "--upload-dir", str(Path(tmp) / "uploads")]
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            except FileNotFoundError:
                raise StageError("mineru-api is not installed (pip install mineru)") from None
            url = f"http://127.0.0.1:{port}"
            try:
                wait_ready(proc, url, timeout, log_path)
                yield url
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def wait_ready(proc: subprocess.Popen, url: str, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise StageError(f"mineru-api exited with {proc.returncode}: {log_path.read_text(errors='replace')[-2000:]}")
        try:
            if requests.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or too busy warming up to answer in time
            pass
        time.sleep(0.3)
    raise StageError(f"mineru-api did not answer /v1/health within {timeout}s: {log_path.read_text(errors='replace')[-2000:]}")


def check_pdf(pdf: bytes) -> None:
    """Reject bytes that are no PDF, need a password or do not open (PDFium, as inside MinerU)."""
    if b"%PDF-" not in pdf[:1024]:  # the header may follow up to 1 KB of junk
        raise Reject("not_a_pdf", f"{len(pdf)} bytes starting {pdf[:40]!r}")
    try:
        pypdfium2.PdfDocument(pdf).close()
    except pypdfium2.PdfiumError as err:
        raise Reject("encrypted_pdf" if "password" in str(err).lower() else "corrupt_pdf", str(err)) from None


# A parse is idempotent, so a busy or restarting server (429, 5xx, a reset or a cut-short answer, a
# stalled one) is asked again; what still fails after the last try is that paper's reject.
RETRY = RetryPolicy(attempts=3, base_delay=1.0, max_sleep=60.0)
MAX_REDIRECTS = 5


def _task_verdict(response: requests.Response) -> bool:
    """mineru-api answers a PDF it failed on with a 500 holding its task (status failed/partial):
    that is its verdict on the PDF, asked again it fails again; a bare 500 is an outage."""
    try:
        body = read_json(response.content)
    except ValueError:
        return False
    return isinstance(body, dict) and body.get("status") in ("failed", "partial")


def parse_pdf(url: str, pdf: bytes, name: str, *, tier: str, ocr_mode: str, page_range: str, timeout: float,
              policy: RetryPolicy = RETRY, slack: float = 30.0) -> tuple[dict, dict[str, bytes]]:
    """middle_json and the crops (zip path -> bytes) of one PDF; Reject when MinerU cannot parse it.
    Each try gets `timeout` (the server's own wait_timeout) + `slack` (the upload and the answer) in
    all: for the server to answer, and for the whole answer to arrive (a dripping server is cut off,
    not waited on)."""
    query = {"tier": tier, "ocr_mode": ocr_mode, "output_formats": "zip", "response_format": "zip", "wait_timeout": int(timeout)}
    if page_range:
        query["page_range"] = page_range
    endpoint = f"{url}/v1/file_parse"
    budget = timeout + slack

    def one_try(session: requests.Session) -> requests.Response:
        started = time.monotonic()
        response = session.post(endpoint, params=query, files={"files": (name, pdf, "application/pdf")}, timeout=budget, stream=True)
        read_body(response, max(0.0, budget - (time.monotonic() - started)))
        return response

    with requests.Session() as session:
        session.max_redirects = MAX_REDIRECTS
        try:
            response = with_retries(lambda: one_try(session), policy, final=_task_verdict)
        except RetriesExhausted as err:
            raise Reject("mineru_failed", f"{endpoint}: {err}") from None
        except requests.RequestException as err:  # a redirect loop, an unreachable server...
            raise Reject("mineru_failed", f"{endpoint}: {type(err).__name__}: {err}") from None
    if response.headers.get("content-type", "").startswith("application/zip"):
        try:
            with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
                middle = read_json(archive.read("middle_json.json"))
                images = {n: archive.read(n) for n in archive.namelist() if n.startswith("images/")}
        except (zipfile.BadZipFile, zlib.error, EOFError, KeyError, ValueError) as err:  # ValueError: bad JSON or encoding
            raise Reject("mineru_failed", f"unreadable zip answer: {type(err).__name__}: {err}") from None
        if not isinstance(middle, dict):
            raise Reject("mineru_failed", f"middle_json.json is a {type(middle).__name__}, not an object")
        return middle, images
    try:
        body = read_json(response.content)
    except ValueError:
        raise Reject("mineru_failed", f"HTTP {response.status_code}: {response.text[:500]}") from None
    if not isinstance(body, dict):
        raise Reject("mineru_failed", f"HTTP {response.status_code}: {response.text[:500]}")
    files = body.get("files") if isinstance(body.get("files"), list) else []
    errors = [f.get("error") if isinstance(f, dict) else f for f in files] or [body.get("error")]
    # an error is {code, message} in the API's shape; a proxy in front of it may answer a bare string
    message = "; ".join(f"{e.get('code')}: {e.get('message')}" if isinstance(e, dict) else str(e) for e in errors)[:1000]
    if body.get("status") not in ("failed", "partial"):
        raise Reject("mineru_failed", f"HTTP {response.status_code}, task {body.get('status')}: {message}")
    if "Failed to load document" in message:
        raise Reject("corrupt_pdf", message)
    raise Reject("mineru_failed", message)
