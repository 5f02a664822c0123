"""The fetch layer (docs/ARCHITECTURE.md "Data from outside"): every download in citeforge goes
through `Fetcher.fetch(url)`.

- Polite: per-host concurrency slots, per-host rate limit, retries with backoff on 429/5xx,
  timeouts and connection resets honouring Retry-After (stages.core.retry), a User-Agent.
- Safe: http(s) only; connect and read timeouts, and a deadline for a whole body (a server
  dripping bytes slower than it sends them never holds a fetch past `total_timeout_s`); a byte cap checked against Content-Length and
  again while streaming; an optional content-type check before the body is read; and an SSRF guard
  that refuses loopback, private, link-local, multicast, reserved, unspecified, non-global and
  cloud-metadata addresses. The guard runs on every redirect hop (redirects are followed here, not
  by requests) and twice per hop: on the resolved host before connecting (a clear
  `blocked_address` error) and on the socket's actual peer after connecting (DNS rebinding).
  `allow_networks` (CIDRs) exempts addresses, which is how tests and the demo reach 127.0.0.1.
- Reproducible: mode `record` writes every response (redirect hops included) and every failure to
  a WARC file; mode `replay` answers from WARC files with no network at all, so a web-derived run
  rebuilds exactly offline. Recorded bodies are stored decoded, so Content-Encoding and
  Transfer-Encoding are dropped from the recorded headers and Content-Length set to the body size.
  A failure (timeout, blocked address, too large...) is a WARC `metadata` record carrying
  {"reason", "detail"}, so a replay also reproduces the rejects.

Failures raise FetchError with a reason code stages can use as their reject reason:
bad_url, dns_error, blocked_address, timeout, connection_error, http_<status>, too_large,
bad_content_type, bad_response, too_many_redirects, not_in_archive. An http_<status> error
carries the response's body (up to 64 KB; recorded and replayed like any body) for APIs that
explain themselves there (a search API's quota error).

`fetch(url, headers=...)` sends extra request headers (an API key) to the url's own origin only:
a redirect to another host gets none of them. Request headers are never recorded.
"""
from __future__ import annotations

import collections
import gzip
import io
import ipaddress
import json
import os
import socket
import stat
import tempfile
import threading
import zlib
import dataclasses
from dataclasses import dataclass, fields
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from .retry import (RETRY_EXCEPTIONS, RETRY_STATUSES, BodyTooLarge, HeaderDeadline, HostRateLimiter, RetriesExhausted, RetryPolicy,
                    read_body, with_retries)
from .stage import Param, StageError, probe_folder

MODES = ("live", "record", "replay")
REDIRECTS = frozenset({301, 302, 303, 307, 308})
# Cloud instance-metadata endpoints (AWS/GCP/Azure/OpenStack, AWS IPv6, Alibaba). All of them are
# non-global anyway; they are named so the error says what was refused.
METADATA_ADDRESSES = frozenset(map(ipaddress.ip_address, ["169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200"]))
FAILURE_TYPE = "application/vnd.citeforge.fetch-failure+json"
_DROPPED_HEADERS = {"content-encoding", "transfer-encoding", "content-length"}


ERROR_BODY_BYTES = 64 * 1024
_NO_LOCATION = " without a Location"


class FetchError(Exception):
    def __init__(self, reason: str, detail: str = "", body: bytes = b""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.body = body  # an error response's body (http_<status>), else empty


@dataclass(frozen=True)
class FetchSettings:
    """The `fetch:` config section (schemas/config/fetch.schema.yaml mirrors these fields)."""

    mode: str = "live"  # live | record | replay
    timeout_s: float = 20.0  # connect timeout and read timeout (between bytes)
    total_timeout_s: float = 120.0  # longest one try may spend reading a body
    max_bytes: int = 20_000_000
    attempts: int = 4  # total tries per request, the first included
    backoff_s: float = 0.5  # first retry waits about this long, then doubles (with jitter)
    max_retry_sleep_s: float = 60.0  # cap on one wait, Retry-After included
    per_host_concurrency: int = 4
    per_host_rate: float = 0.0  # requests per second per host; 0 = no limit
    max_redirects: int = 5
    user_agent: str = "citeforge/0.1 (benchmark construction; polite fetcher)"
    allow_networks: tuple[str, ...] = ()  # CIDRs exempt from the address guard (tests, demo)
    replay_warcs: tuple[str, ...] = ()  # WARC files replay mode answers from

    @classmethod
    def from_dict(cls, values: dict | None) -> "FetchSettings":
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown fetch setting(s) {unknown}; known: {sorted(known)}")
        for key in ("allow_networks", "replay_warcs"):
            if key in values:
                values[key] = tuple(values[key] or ())
        settings = cls(**values)
        if settings.mode not in MODES:
            raise ValueError(f"fetch mode must be one of {MODES}, got {settings.mode!r}")
        for cidr in settings.allow_networks:
            ipaddress.ip_network(cidr, strict=False)  # a bad CIDR fails here, naming itself
        return settings


@dataclass
class Fetched:
    url: str
    final_url: str
    status: int
    headers: dict[str, str]
    body: bytes
    redirects: int = 0

    @property
    def content_type(self) -> str:
        return _media_type(self.headers.get("content-type", ""))


def _media_type(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


# -- the address guard ----------------------------------------------------------------------------
class AddressGuard:
    def __init__(self, allow_networks: tuple[str, ...] = ()):
        self.allow = [ipaddress.ip_network(c, strict=False) for c in allow_networks]

    def why_blocked(self, address: str) -> str | None:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone id
        if ip.version == 6 and ip.ipv4_mapped:
            ip = ip.ipv4_mapped
        if any(ip in net for net in self.allow):
            return None
        for why, hit in (
            ("cloud metadata", ip in METADATA_ADDRESSES),
            ("loopback", ip.is_loopback),
            ("link-local", ip.is_link_local),
            ("multicast", ip.is_multicast),
            ("unspecified", ip.is_unspecified),
            ("private", ip.is_private),
            ("reserved", ip.is_reserved),
            ("not globally routable", not ip.is_global),
        ):
            if hit:
                return why
        return None

    def check_address(self, address: str, host: str) -> None:
        why = self.why_blocked(address)
        if why:
            raise FetchError("blocked_address", f"{host} is {address} ({why})")

    def check_host(self, host: str, port: int) -> None:
        """Resolve `host` and refuse it if any address it resolves to is blocked."""
        try:
            infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError) as err:
            raise FetchError("dns_error", f"{host}: {err}") from None
        for info in infos:
            self.check_address(info[4][0], host)


class _PeerCheck:
    """Connection mixin: after connecting, check the socket's real peer (defeats DNS rebinding)."""

    guard: AddressGuard

    def _new_conn(self):
        sock = super()._new_conn()
        try:
            self.guard.check_address(sock.getpeername()[0], self.host)
        except FetchError:
            sock.close()
            raise
        return sock


class _GuardedAdapter(HTTPAdapter):
    def __init__(self, guard: AddressGuard, pool_maxsize: int):
        http = type("GuardedHTTPConnection", (_PeerCheck, HeaderDeadline, HTTPConnection), {"guard": guard})
        https = type("GuardedHTTPSConnection", (_PeerCheck, HeaderDeadline, HTTPSConnection), {"guard": guard})
        self._pool_classes = {
            "http": type("GuardedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": http}),
            "https": type("GuardedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": https}),
        }
        super().__init__(pool_maxsize=pool_maxsize, max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = self._pool_classes


# -- WARC record and replay -----------------------------------------------------------------------
class WarcRecorder:
    """Appends responses and failures to one gzipped WARC file, written to a temp file beside the
    target and renamed into place by `commit` (a failed stage leaves no half archive)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        check_record_target(self.path)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        self._tmp = Path(tmp)
        self._fh = os.fdopen(fd, "wb")
        self._writer = WARCWriter(self._fh, gzip=True)
        self._lock = threading.Lock()

    def response(self, url: str, status: int, reason: str, headers: list[tuple[str, str]], body: bytes) -> None:
        kept = [(k, v) for k, v in headers if k.lower() not in _DROPPED_HEADERS] + [("Content-Length", str(len(body)))]
        http_headers = StatusAndHeaders(f"{status} {reason or 'OK'}", kept, protocol="HTTP/1.1")
        with self._lock:
            record = self._writer.create_warc_record(url, "response", payload=io.BytesIO(body), http_headers=http_headers)
            self._writer.write_record(record)

    def failure(self, url: str, err: FetchError) -> None:
        payload = json.dumps({"reason": err.reason, "detail": err.detail}).encode()
        with self._lock:
            record = self._writer.create_warc_record(url, "metadata", payload=io.BytesIO(payload), warc_content_type=FAILURE_TYPE)
            self._writer.write_record(record)

    def commit(self) -> None:
        self._fh.close()
        os.chmod(self._tmp, 0o644)
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        self._fh.close()
        self._tmp.unlink(missing_ok=True)


@dataclass
class _Recorded:
    """One url's record in a replay WARC. Its body is read from the file when asked, so that a
    replay holds the run's urls and headers, not every page and image of the run at once."""

    status: int
    headers: dict[str, str]
    at: tuple[str, str, int] | None = None  # (url, WARC file, offset of its record)
    failure: tuple[str, str] | None = None

    @property
    def body(self) -> bytes:
        """The record's body, read from its WARC; DamagedArchive when the file no longer holds
        that url's record there (replaced since it was loaded, or unreadable)."""
        if self.at is None:
            return b""
        url, path, offset = self.at
        try:
            with open(path, "rb") as stream:
                stream.seek(offset)
                record = next(iter(ArchiveIterator(stream)))
                if record.rec_headers.get_header("WARC-Target-URI") != url:
                    raise DamagedArchive(path, f"the record at offset {offset} is no longer {url}'s (the file changed since it was read)")
                return record.content_stream().read()
        except DamagedArchive:
            raise
        except Exception as err:  # OSError, warcio's ArchiveLoadFailed, StopIteration at the end of a shortened file
            raise DamagedArchive(path, f"the record of {url} at offset {offset} does not read: {type(err).__name__}: {err}") from None


class DamagedArchive(StageError):
    """A replay WARC that is empty, truncated or not a WARC: replaying part of it would turn its
    lost records into ordinary `not_in_archive` rejects, so reading it fails instead."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"replay WARC {path} is damaged: {problem}")


def load_archive(paths: tuple[str, ...]) -> dict[str, _Recorded]:
    """url -> what was recorded for it (the first record of a url wins). Raises DamagedArchive
    naming the file and where it breaks."""
    archive: dict[str, _Recorded] = {}
    for path in paths:
        try:
            stream = open(path, "rb")
        except OSError as err:
            raise ValueError(f"cannot open replay WARC {path}: {err}") from None
        with stream:
            _check_gzip(path, stream)
            records, seen = ArchiveIterator(stream), 0
            try:
                for record in records:
                    seen += 1
                    body = record.content_stream().read()  # read whole, so a cut record is found here; kept only for a failure
                    missing = getattr(record.raw_stream, "limit", 0)  # Content-Length promised more than the file holds
                    offset = records.get_record_offset()  # (reads the record to its end: after the body)
                    if not record.rec_headers.get_header("WARC-Record-ID") or not record.rec_headers.get_header("WARC-Type"):
                        raise DamagedArchive(path, f"no WARC record at offset {offset} (missing WARC-Record-ID/WARC-Type)")
                    if missing:
                        raise DamagedArchive(path, f"the record at offset {offset} is cut short ({missing} bytes missing)")
                    url = record.rec_headers.get_header("WARC-Target-URI")
                    if not url or url in archive:
                        continue
                    if record.rec_type == "response" and record.http_headers is not None:
                        headers = {k.lower(): v for k, v in record.http_headers.headers}
                        archive[url] = _Recorded(int(record.http_headers.get_statuscode()), headers, (url, path, offset))
                    elif record.rec_type == "metadata" and record.rec_headers.get_header("Content-Type") == FAILURE_TYPE:
                        failure = json.loads(body)
                        archive[url] = _Recorded(0, {}, failure=(failure["reason"], failure["detail"]))
            except DamagedArchive:
                raise
            except Exception as err:  # warcio's ArchiveLoadFailed, a bad status line, undecodable JSON...
                problem = " ".join(str(err).split())[:300]
                raise DamagedArchive(path, f"unreadable after offset {records.offset}: {type(err).__name__}: {problem}") from None
            if not seen:
                raise DamagedArchive(path, "it holds no WARC record")
    return archive


def _check_gzip(path: str, stream) -> None:
    """A gzipped WARC must decompress to its end: a truncated or garbled file fails here, naming
    the byte offset where it breaks (warcio alone stops quietly at the break)."""
    head = stream.read(2)
    stream.seek(0)
    if not head:
        raise DamagedArchive(path, "the file is empty")
    if head != b"\x1f\x8b":
        return  # an uncompressed WARC: the record checks apply
    unzipped = gzip.GzipFile(fileobj=stream)
    try:
        while unzipped.read(1 << 20):
            pass
    except (OSError, EOFError, zlib.error) as err:
        raise DamagedArchive(path, f"gzip stream broken near byte {stream.tell()}: {err}") from None
    finally:
        stream.seek(0)


# -- the fetcher ----------------------------------------------------------------------------------
class Fetcher:
    """Thread-safe; use one per stage run and `close()` it (or use it as a context manager): in
    record mode, close(commit=True) publishes the WARC file."""

    def __init__(self, settings: FetchSettings, record_to: str | os.PathLike | None = None):
        self.settings = settings
        self.guard = AddressGuard(settings.allow_networks)
        self.policy = RetryPolicy(settings.attempts, settings.backoff_s, settings.max_retry_sleep_s)
        self.limiter = HostRateLimiter(settings.per_host_rate or None)
        self.stats: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self.recorder = None
        self.archive: dict[str, _Recorded] = {}
        if settings.mode == "record":
            if not record_to:
                raise ValueError("fetch mode 'record' needs a WARC path to record to")
            self.recorder = WarcRecorder(record_to)
        elif settings.mode == "replay":
            if not settings.replay_warcs:
                raise ValueError("fetch mode 'replay' needs replay_warcs")
            self.archive = load_archive(settings.replay_warcs)
        self.session = requests.Session()
        self.session.headers["User-Agent"] = settings.user_agent
        adapter = _GuardedAdapter(self.guard, pool_maxsize=max(settings.per_host_concurrency, 1))
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def __enter__(self) -> "Fetcher":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)

    def close(self, commit: bool = True) -> None:
        self.session.close()
        if self.recorder is not None:
            self.recorder.commit() if commit else self.recorder.abort()
            self.recorder = None

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.stats[key] += n

    def fetch(self, url: str, accept: tuple[str, ...] | None = None, headers: dict[str, str] | None = None,
              max_bytes: int | None = None) -> Fetched:
        """GET `url` following redirects. `accept`: allowed media types; an entry ending in '/'
        is a prefix ('image/'); a response without a Content-Type passes. `headers`: extra
        request headers, sent to `url`'s origin only. `max_bytes`: this request's byte cap instead
        of the settings' (too_large past it, in replay too). Raises FetchError."""
        self._count("fetches")
        limit = max_bytes or self.settings.max_bytes
        try:
            parse_url(url)  # a url that does not parse (`http://[::1`) is this url's bad_url, in every mode
            if self.settings.mode == "replay":
                return self._replay(url, accept, limit)
            return self._live(url, accept, headers or {}, limit)
        except FetchError as err:
            self._count(f"failed_{err.reason}")
            raise

    def post_json(self, url: str, body: dict) -> Fetched:
        """POST a JSON body (a login) with retries, the rate limit and the address guard; no
        redirects. Never recorded, as it carries credentials; a replay sends nothing, so refuses it."""
        if self.settings.mode == "replay":
            raise FetchError("not_in_archive", f"POST {url}: a replay sends no requests")
        parts = parse_url(url)
        self.guard.check_host(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))

        def attempt() -> requests.Response:
            self.limiter.wait(url)
            self._count("requests")
            return self.session.post(url, json=body, allow_redirects=False, stream=True, timeout=(self.settings.timeout_s, self.settings.timeout_s))

        try:
            response = with_retries(attempt, self.policy, on_retry=lambda _n, _why: self._count("retries"))
            with response:
                data = self._read(url, response, self.settings.max_bytes)
        except RetriesExhausted as err:
            reason = f"http_{err.last_status}" if err.last_status is not None else "connection_error"
            raise FetchError(reason, f"POST {url}: {err}") from None
        except (requests.RequestException, ValueError) as err:
            raise FetchError("bad_response", f"POST {url}: {type(err).__name__}: {err}") from None
        return Fetched(url, url, response.status_code, {k.lower(): v for k, v in response.headers.items()}, data)

    # live ---------------------------------------------------------------------------------------
    def _live(self, url: str, accept: tuple[str, ...] | None, extra_headers: dict[str, str], limit: int) -> Fetched:
        current = url
        origin = _origin(url)
        for hop in range(self.settings.max_redirects + 1):
            try:
                parts = parse_url(current)
                self.guard.check_host(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
                status, reason, headers, body = self._get(current, accept, extra_headers if _origin(current) == origin else {}, limit)
            except FetchError as err:
                if self.recorder is not None:  # under the hop's url, where a replay will look
                    self.recorder.failure(current, err)
                raise
            if self.recorder is not None:
                self.recorder.response(current, status, reason, headers, body)
            lower = {k.lower(): v for k, v in headers}
            if status in REDIRECTS and "location" in lower:
                current = _redirect(current, lower["location"])
                continue
            if not 200 <= status < 300:  # an error, or a 3xx that is no redirect (300, 304, no Location): no page
                raise FetchError(f"http_{status}", f"{current}: HTTP {status} {reason}" + _NO_LOCATION * (status in REDIRECTS), body)
            return Fetched(url, current, status, lower, body, hop)
        raise FetchError("too_many_redirects", f"{url}: more than {self.settings.max_redirects} redirects")

    def _slot(self, host: str) -> threading.BoundedSemaphore:
        with self._lock:
            if host not in self._slots:
                self._slots[host] = threading.BoundedSemaphore(max(self.settings.per_host_concurrency, 1))
            return self._slots[host]

    def _get(self, url: str, accept: tuple[str, ...] | None, extra_headers: dict[str, str], limit: int) -> tuple[int, str, list[tuple[str, str]], bytes]:
        """One hop with retries, holding a slot of its host (retry waits included: a host that
        said 429 gets no other request from us meanwhile)."""
        body = b""
        last_error: list[BaseException] = []

        def attempt() -> requests.Response:
            nonlocal body
            self.limiter.wait(url)
            self._count("requests")
            try:
                response = self.session.get(url, headers=extra_headers, stream=True, allow_redirects=False, timeout=(self.settings.timeout_s, self.settings.timeout_s))
                body = b""
                if response.status_code < 300:
                    # the final answer: read it now, so a body cut short is retried like a reset
                    try:
                        _check_type(url, response.headers.get("content-type", ""), accept)
                        body = self._read(url, response, limit)
                    finally:
                        response.close()
                elif response.status_code >= 400 and response.status_code not in RETRY_STATUSES:
                    try:  # an error that will not be retried: keep what it says (its first bytes, in the deadline)
                        body = read_body(response, self.settings.total_timeout_s, ERROR_BODY_BYTES, head=True)
                    except requests.RequestException:
                        body = b""  # the status is the answer; a body that drips or breaks adds nothing
            except RETRY_EXCEPTIONS as err:
                last_error[:] = [err]
                raise
            except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema) as err:
                raise FetchError("bad_url", f"{url}: {err}") from None
            except (requests.RequestException, ValueError) as err:  # undecodable gzip, a malformed header, a Location that does not parse...
                raise FetchError("bad_response", f"{url}: {type(err).__name__}: {err}") from None
            return response

        def on_retry(attempt_no: int, why: str) -> None:
            self._count("retries")

        with self._slot(urlsplit(url).netloc):
            try:
                response = with_retries(attempt, self.policy, on_retry=on_retry)
            except RetriesExhausted as err:
                if err.last_status is not None:
                    raise FetchError(f"http_{err.last_status}", f"{url}: {err}") from None
                timed_out = bool(last_error) and _is_timeout(last_error[0])
                raise FetchError("timeout" if timed_out else "connection_error", f"{url}: {err}") from None
        headers = list(response.headers.items())
        response.close()
        self._count("bytes", len(body))
        return response.status_code, response.reason or "", headers, body

    def _read(self, url: str, response: requests.Response, limit: int) -> bytes:
        try:
            return read_body(response, self.settings.total_timeout_s, limit)
        except BodyTooLarge as err:
            raise FetchError("too_large", f"{url}: {err}") from None

    # replay -------------------------------------------------------------------------------------
    def _replay(self, url: str, accept: tuple[str, ...] | None, limit: int) -> Fetched:
        current = url
        for hop in range(self.settings.max_redirects + 1):
            recorded = self.archive.get(current)
            if recorded is None:
                raise FetchError("not_in_archive", f"{current} is in none of {len(self.settings.replay_warcs)} replay WARC file(s)")
            self._count("replayed")
            if recorded.failure:
                raise FetchError(*recorded.failure)
            if recorded.status in REDIRECTS and "location" in recorded.headers:
                current = _redirect(current, recorded.headers["location"])
                continue
            body = recorded.body  # read from the WARC: once
            if not 200 <= recorded.status < 300:
                raise FetchError(f"http_{recorded.status}", f"{current}: HTTP {recorded.status}{_NO_LOCATION * (recorded.status in REDIRECTS)} (replayed)",
                                 body[:ERROR_BODY_BYTES])
            _check_type(current, recorded.headers.get("content-type", ""), accept)
            if len(body) > limit:
                raise FetchError("too_large", f"{current}: body of {len(body)} > {limit} bytes")
            return Fetched(url, current, recorded.status, recorded.headers, body, hop)
        raise FetchError("too_many_redirects", f"{url}: more than {self.settings.max_redirects} redirects")


def _is_timeout(err: BaseException) -> bool:
    # requests raises ConnectionError(ReadTimeoutError) for a read timeout while streaming
    return isinstance(err, requests.Timeout) or "timed out" in str(err).lower()


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.lower()


def _redirect(current: str, location: str) -> str:
    """The url a redirect's Location points to; a Location that does not parse is a bad_response."""
    try:
        return urljoin(current, location)
    except ValueError as err:
        raise FetchError("bad_response", f"{current}: redirect to {location[:300]!r}: {err}") from None


def parse_url(url: str):
    """The url's parts if it is an http(s) url with a host that parses, else FetchError bad_url."""
    if not isinstance(url, str):
        raise FetchError("bad_url", f"{url!r}: a url must be a string, not {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # raises ValueError on a bad port
    except ValueError as err:
        raise FetchError("bad_url", f"{url[:300]!r}: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError("bad_url", f"{url[:300]!r}: only http(s) URLs with a host are fetched")
    return parts


def _check_type(url: str, content_type: str, accept: tuple[str, ...] | None) -> None:
    media = _media_type(content_type)
    if not accept or not media:
        return
    if not any(media.startswith(a) if a.endswith("/") else media == a for a in accept):
        raise FetchError("bad_content_type", f"{url}: Content-Type {media!r} not in {list(accept)}")


# The reasons a FetchError carries, which fetching stages reject with: merged into their `rejects`.
FETCH_REJECTS = {
    "bad_url": "the url does not parse, or is not http(s) with a host",
    "dns_error": "the url's host name does not resolve",
    "blocked_address": "the host is a loopback, private, link-local, cloud-metadata or other non-public address",
    "timeout": "the server did not answer in time, retries included",
    "connection_error": "the connection failed or was reset, retries included",
    "http_<status>": "the server answered this HTTP error status (429 and 5xx after the retries)",
    "too_large": "the body is larger than the byte cap",
    "bad_content_type": "the response's Content-Type is not one the stage accepts",
    "bad_response": "a malformed response (a bad header, an undecodable body encoding)",
    "too_many_redirects": "more redirects than fetch.max_redirects",
    "not_in_archive": "fetch mode replay: the url is in none of the replay WARC files",
}

# The params of every fetching stage, read by `stage_fetch_settings`.
FETCH_PARAMS = {
    "fetch": Param(dict, {}, "fetch settings: the fetch: config section (stages.core.fetch.FetchSettings)", schema="fetch"),
    "record_warc": Param(str, "", "in fetch mode 'record': the WARC file every response is written to"),
}


def stage_fetch_settings(ctx) -> FetchSettings:
    """A fetching stage's settings: its `fetch` param, the replay WARCs given as its `warcs` input,
    and a check that record mode names the WARC to write (param `record_warc`)."""
    try:
        settings = FetchSettings.from_dict(ctx.params["fetch"])
    except (TypeError, ValueError) as err:
        raise StageError(f"param fetch: {err}") from None
    if ctx.has_input("warcs"):
        settings = dataclasses.replace(settings, replay_warcs=tuple(ctx.input_paths("warcs")))
    record = ctx.params["record_warc"]
    if settings.mode != "record":
        if record:
            raise StageError(f"param record_warc is {record!r} but fetch mode is {settings.mode!r}: a WARC is written in mode 'record' only")
        return settings
    if not record:
        raise StageError("fetch mode is 'record' but param record_warc (the WARC file to write) is empty")
    check_record_target(Path(record))  # before any fetch (the recorder checks again when it opens)
    return settings


def check_record_target(target: Path) -> None:
    """A recording replaces the file at its path: that must be nothing or a regular file holding a
    gzipped WARC (an earlier recording; empty only when named .warc.gz), never a folder, a device
    or some other file, and its folder must take a file."""
    try:
        if target.exists() or target.is_symlink():
            kind = os.stat(target).st_mode
            if not stat.S_ISREG(kind):
                raise StageError(f"WARC file {target}: it is {'a folder' if stat.S_ISDIR(kind) else 'not a regular file'}, "
                                 "not a WARC file a recording may replace")
            if not (_is_gzipped_warc(target) or (target.stat().st_size == 0 and target.name.endswith(".warc.gz"))):
                raise StageError(f"WARC file {target}: it exists and is not a gzipped WARC file; "
                                 "a recording would replace it, so name a new file")
        probe_folder(target.parent, target.name)
    except OSError as err:
        raise StageError(f"WARC file {target}: cannot write it: {err.strerror or err}") from None


def _is_gzipped_warc(path: Path) -> bool:
    try:
        with gzip.open(path, "rb") as fh:
            return fh.read(5) == b"WARC/"
    except (OSError, EOFError, zlib.error):
        return False
