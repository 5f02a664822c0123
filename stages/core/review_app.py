"""The review page: every human review sheet (stages/core/review.py) one item at a time in a browser.

    python -m stages.core.review_app data/runs/demo/mcitebench/quality_control/review_sheet.csv

then open the printed address. The page shows an item's fields (question, answer, the judge's
scores, the parser's proposal...) and its entries laid out as the reviewer judges them: gold
evidence and distractors marked apart, each with its figure or table crop beside it, tables drawn
as tables; MAVIS's annotation sheet shows the question's images and each shown document with its
own grounded yes / no. Keep or reject with a note goes into the decisions file: the sheet's own
CSV layout with the decision columns filled, exactly what the stage reading it honours (config
`mcitebench.review_sheet`, `mcitebench.pairing_review`, `mavis.annotations`). Every decision
rewrites the file atomically and every page view reads it again, so the page and a spreadsheet
are interchangeable and a review resumes where it stopped; rows the exported sheet gained since
(a rebuilt run) appear undecided, decisions of rows it no longer has are dropped. A decisions file
the page cannot read (not UTF-8, not CSV, two rows deciding one item differently) is shown as a
page naming the file and the fix, and is never overwritten.

Keys: k keep, r reject, n / right arrow next, p / left arrow previous, u next undecided, e edit
the note (Escape leaves it), 1-9 a shown document's grounded yes / no (MAVIS). Images come from
the run's catalog (element crops and cached images in the image store).

The page answers only on 127.0.0.1 / localhost (and the names given with --allow-host): another
Host header is refused, so a web page cannot read it through DNS rebinding; a decision needs the
page's per-session token and, from a browser, an Origin of an allowed host, so another website
cannot write into the sheet.
"""
from __future__ import annotations

import argparse
import hmac
import html.parser
import re
import secrets
from pathlib import Path
from urllib.parse import urlsplit

import duckdb
from flask import Flask, abort, redirect, render_template_string, request, send_file, session, url_for
from markupsafe import Markup, escape

from .images import ImageStore
from .review import SheetKind, read_csv, sheet_kind, write_sheet
from .stage import StageError

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


class SheetProblem(StageError):
    """A sheet or decisions file the page cannot use; shown as a page, never written over."""


def _read_csv(path: Path) -> tuple[list[str], list[dict]]:
    """review.read_csv (the writer's formula escapes undone), its one-line problem shown as a page."""
    try:
        return read_csv(path)
    except StageError as err:
        raise SheetProblem(str(err)) from None


# ------------------------------------------------------------------------------- tables as tables
class _TableHTML(html.parser.HTMLParser):
    """A table's markup (MinerU writes tables as HTML) re-emitted with only table tags, row and
    column spans and inline emphasis; every text is escaped and anything else is dropped, so an
    element's text can never inject markup into the page."""

    KEEP = {"table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "b", "strong", "i", "em", "sub", "sup"}
    SKIP = {"script", "style", "iframe", "object", "template"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.open: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skipping += 1
        elif tag == "br":
            self.out.append("<br>")
        elif tag in self.KEEP and not self.skipping:
            spans = "".join(f' {k}="{int(v)}"' for k, v in attrs if k in ("rowspan", "colspan") and (v or "").isdecimal() and 0 < int(v) < 1000)
            self.out.append(f"<{tag}{spans}>")
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.open:
            while self.open:
                last = self.open.pop()
                self.out.append(f"</{last}>")
                if last == tag:
                    break

    def handle_data(self, data):
        if not self.skipping:
            self.out.append(str(escape(data)))

    def result(self) -> str:
        self.close()
        return "".join(self.out) + "".join(f"</{t}>" for t in reversed(self.open))


def table_markup(text: str) -> Markup | None:
    """A table element's text drawn as a table: HTML (sanitised) or a markdown pipe table; None
    when the text is neither."""
    if re.search(r"<table\b", text, re.I):
        parser = _TableHTML()
        parser.feed(text)
        return Markup(parser.result())
    if re.search(r"^\s*\|.*\|\s*$", text, re.M):
        from markdown_it import MarkdownIt

        return Markup(MarkdownIt("commonmark", {"html": False}).enable("table").render(text))  # raw HTML escaped
    return None


# ------------------------------------------------------------------------------- an item's entries
# An entry is one thing the reviewer weighs: a gold evidence item, a distractor, an element the
# parser proposes, a retrieved document. Each is a dict: role (evidence | distractor | proposed |
# chosen | document), title, modality, caption, text, table (Markup or None), image (sha256 or None),
# and for MAVIS documents the column its grounded decision goes to.
_ENTRY_LINE = re.compile(r"^\[(?P<title>[^\]\n]+)\] \((?P<modality>text|figure|table|equation)\) ?", re.M)


def _entry(role: str, title: str, modality: str, text: str = "", caption: str = "", image: str | None = None, **extra) -> dict:
    text = text or ""
    return {"role": role, "title": title, "modality": modality or "", "caption": caption or "", "text": text,
            "table": table_markup(text) if modality == "table" else None, "image": image, **extra}


def _sheet_entries(role: str, cell: str) -> list[dict]:
    """Entries from a sheet cell written as lines "[key] (modality) content" (quality_control)."""
    marks = list(_ENTRY_LINE.finditer(cell or ""))
    return [_entry(role, m["title"], m["modality"], cell[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(cell)].strip())
            for i, m in enumerate(marks)]


def _query(con, sql: str, params: dict) -> list[tuple]:
    try:
        return con.execute(sql, params).fetchall()
    except (duckdb.CatalogException, duckdb.BinderException):  # a run without these tables or columns
        return []


_ELEMENT = "el.label, el.modality, el.text, el.caption, el.image_sha256"


def _element_entry(role: str, title: str | None, label, modality, text, caption, sha) -> dict:
    # a figure's text is its caption again; a table's caption sits above the table
    return _entry(role, title or label or "", modality, "" if modality == "figure" or text == caption else text, caption, sha)


def quality_control_entries(row: dict, con) -> list[dict]:
    """The sample as §3.5 checks it: the gold evidence, then the distractors, from the catalog
    (whole elements with their crops); without a catalog, the sheet's own evidence columns."""
    q = {"q": row.get("question_id", "")}
    evidence = _query(con, f"select e.key, {_ELEMENT} from mcitebench.evidence e join mcitebench.elements el on el.id = e.element_id "
                           "where e.question_id = $q order by e.rank", q) if con else []
    distractors = _query(con, f"select null, {_ELEMENT} from mcitebench.distractors d join mcitebench.elements el on el.id = d.element_id "
                              "where d.question_id = $q order by d.rank", q) if con else []
    if not evidence:
        return _sheet_entries("evidence", row.get("evidence", "")) + _sheet_entries("distractor", row.get("distractors", ""))
    return [_element_entry("evidence", *r) for r in evidence] + [_element_entry("distractor", *r) for r in distractors]


def pairing_entries(row: dict, con) -> list[dict]:
    """The elements the parser proposes for the reference, then those typed in the decision."""
    proposed = row.get("proposed", "").split()
    typed = [e for e in row.get("elements", "").split() if e != "none" and e not in proposed]
    out = []
    for role, ids in (("proposed", proposed), ("chosen", typed)):
        found = {r[0]: r[1:] for r in _query(con, f"select el.id, {_ELEMENT} from mcitebench.elements el where el.id in (select unnest($ids))",
                                             {"ids": ids})} if con and ids else {}
        out += [_element_entry(role, f"{i} {found[i][0] or ''}".strip(), *found[i]) if i in found else _entry(role, i, "")
                for i in ids]
    if not out and row.get("proposed_evidence"):  # no catalog: the sheet's preview lines
        out = [_entry("proposed", line.split(" ", 1)[0], "", line.split(": ", 1)[-1]) for line in row["proposed_evidence"].splitlines()]
    return out


def annotation_entries(row: dict, con) -> list[dict]:
    """MAVIS: the fact's shown documents doc_1..doc_k, each with its grounded decision; an image
    document's picture is the one cached for that url."""
    out, k = [], 1
    while f"doc_{k}" in row:
        doc = row[f"doc_{k}"]
        if doc:
            modality, content = row.get(f"doc_{k}_modality", ""), row.get(f"doc_{k}_content", "")
            image = None
            if modality == "image" and con:
                found = _first(con, "select sha256 from mavis.{table} where url = $url and sha256 is not null "
                                    "order by owner_id = $fact desc limit 1", {"url": content, "fact": row.get("fact_id", "")})
                image = found[0][0] if found else None
            out.append(_entry("document", f"document {k}: {doc}", modality, content if modality != "image" else "",
                              content if modality == "image" else "", image, key=str(k), decision=f"grounded_{k}"))
        k += 1
    return out


def annotation_question_images(row: dict, con) -> list[str]:
    """The post's images (a MAVIS question is about them)."""
    if not con:
        return []
    found = _first(con, "select c.sha256 from mavis.instances i join mavis.{table} c on c.owner_id = i.post_id "
                        "where i.id = $instance and c.sha256 is not null order by c.position", {"instance": row.get("instance_id", "")})
    return list(dict.fromkeys(sha for (sha,) in found))


def _first(con, sql: str, params: dict) -> list[tuple]:
    """The answer over the cached images (every image a stage stored), else over the deduplicated
    ones (a catalog built from the image stages' last step only)."""
    for table in ("images_cached", "images_deduped"):
        found = _query(con, sql.format(table=table), params)
        if found:
            return found
    return []


ENTRIES = {"quality_control": quality_control_entries, "pairing": pairing_entries, "annotation": annotation_entries}


class Review:
    """The exported sheet merged with the decisions file, item by item."""

    def __init__(self, sheet: Path, decisions: Path, catalog: Path | None, image_store: Path):
        # absolute from the start: the paths a user types are relative to where the page was started
        self.sheet, self.decisions = Path(sheet).resolve(), Path(decisions).resolve()
        self.catalog = Path(catalog).resolve() if catalog else None
        self.store = ImageStore(Path(image_store).resolve())
        self.columns, _ = _read_csv(self.sheet)
        self.kind: SheetKind = sheet_kind(self.columns)

    def key(self, row: dict) -> tuple:
        return tuple(row[c] for c in self.kind.key)

    def decision_columns(self) -> list[str]:
        entry = [self.kind.entry_decision.format(k=k) for k in range(1, 100) if self.kind.entry_decision
                 and self.kind.entry_decision.format(k=k) in self.columns]
        return [self.kind.column, *entry, self.kind.note]

    def rows(self) -> list[dict]:
        """The sheet's rows with the decisions file's decisions and note (read on every call)."""
        _, rows = _read_csv(self.sheet)
        if not self.decisions.exists():
            return rows
        columns, decided = _read_csv(self.decisions)
        missing = [c for c in (*self.kind.key, self.kind.column) if c not in columns]
        if missing:
            raise SheetProblem(f"{self.decisions} lacks the columns {missing}: it is not a decisions file of this sheet "
                               f"({self.kind.name}; its header: {columns}).")
        by_key: dict[tuple, tuple[int, dict]] = {}
        for line, row in enumerate(decided, start=2):
            key = self.key(row)
            if key in by_key and by_key[key][1][self.kind.column] != row[self.kind.column]:
                raise SheetProblem(f"{self.decisions}: lines {by_key[key][0]} and {line} decide {' / '.join(key)} differently "
                                   f"({by_key[key][1][self.kind.column]!r}, {row[self.kind.column]!r}); delete one of them.")
            by_key.setdefault(key, (line, row))
        for row in rows:
            if self.key(row) in by_key:
                theirs = by_key[self.key(row)][1]
                row.update({c: theirs.get(c, "") for c in self.decision_columns()})
        return rows

    def decide(self, index: int, decision: str, note: str, value: str = "", grounded: dict[str, str] | None = None) -> None:
        rows = self.rows()
        kind, row, grounded = self.kind, rows[index], grounded or {}
        shown = [e["decision"] for e in self.entries(row) if e.get("decision")]
        if decision == "keep":
            filled = kind.keep if kind.keep is not None else value.strip()
            if not filled:
                raise ValueError(f"keep needs a value for {kind.column}")
            undecided = [c for c in shown if grounded.get(c) not in ("yes", "no")]
            if undecided:
                raise ValueError(f"keep needs yes or no for every shown document: {', '.join(undecided)}")
        elif decision == "reject":
            filled = kind.reject
        elif decision == "clear":
            filled = ""
        else:
            raise ValueError(f"decision must be keep, reject or clear, got {decision!r}")
        row[kind.column] = filled
        for column in shown:
            row[column] = grounded.get(column, "") if decision != "clear" and grounded.get(column) in ("yes", "no") else ""
        row[kind.note] = note.strip()
        self.decisions.parent.mkdir(parents=True, exist_ok=True)
        write_sheet(self.decisions, self.columns, rows)

    def _catalog(self):
        if self.catalog is None or not self.catalog.exists():
            return None
        return duckdb.connect(str(self.catalog), read_only=True)

    def entries(self, row: dict) -> list[dict]:
        con = self._catalog()
        try:
            return ENTRIES[self.kind.layout](row, con)
        finally:
            if con is not None:
                con.close()

    def question_images(self, row: dict) -> list[str]:
        if self.kind.layout != "annotation":
            return []
        con = self._catalog()
        try:
            return annotation_question_images(row, con)
        finally:
            if con is not None:
                con.close()


STYLE = """
 body { font-family: system-ui, sans-serif; margin: 1em auto; max-width: 80em; padding: 0 1em; color: #222; }
 header { position: sticky; top: 0; background: #fff; border-bottom: 1px solid #ddd; padding: .4em 0; z-index: 1; }
 .field { margin: .35em 0; } .name { color: #666; font-size: .8em; text-transform: uppercase; letter-spacing: .03em; }
 .value { white-space: pre-wrap; }
 .decided-keep { color: #1a7f37; } .decided-reject { color: #c62828; } .error { color: #c62828; font-weight: bold; }
 kbd { border: 1px solid #999; padding: 0 .3em; border-radius: 3px; font-size: .85em; background: #f6f6f6; }
 textarea, input[type=text] { width: 100%; box-sizing: border-box; }
 .entries h2 { font-size: 1em; margin: 1em 0 .3em; }
 .entry { display: flex; gap: 1em; align-items: flex-start; margin: .6em 0; padding: .6em .8em; border-radius: 4px; }
 .entry .body { flex: 1 1 55%; min-width: 0; } .entry .crop { flex: 0 1 42%; }
 .entry .crop img { width: 100%; height: auto; max-height: 22em; object-fit: contain; object-position: left top;
                    border: 1px solid #ccc; background: #fff; }
 .role-evidence { border: 1px solid #1a7f37; border-left: 8px solid #1a7f37; background: #f0faf2; }
 .role-distractor { border: 1px dashed #9a6700; border-left: 8px solid #9a6700; background: #fffaf0; }
 .role-proposed, .role-chosen, .role-document { border: 1px solid #0969da; border-left: 8px solid #0969da; background: #f3f8ff; }
 .badge { display: inline-block; font-size: .75em; font-weight: bold; color: #fff; padding: .1em .5em; border-radius: 3px; margin-right: .4em; }
 .role-evidence .badge { background: #1a7f37; } .role-distractor .badge { background: #9a6700; }
 .role-proposed .badge, .role-chosen .badge, .role-document .badge { background: #0969da; }
 .entry .title { font-weight: bold; } .entry .modality { color: #666; font-size: .85em; }
 .entry .caption { font-style: italic; margin: .3em 0; } .entry .text { white-space: pre-wrap; margin: .3em 0; }
 .entry table { border-collapse: collapse; margin: .4em 0; font-size: .85em; background: #fff; }
 .entry td, .entry th { border: 1px solid #999; padding: .15em .4em; }
 .grounded { margin-top: .4em; } .grounded label { margin-right: .8em; }
 .question-images img { height: 16em; max-width: 48%; object-fit: contain; border: 1px solid #ccc; margin: .2em; }
 .hint { color: #444; margin: .6em 0 .2em; }
"""

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{{ kind.name }}: {{ index + 1 }} of {{ rows|length }}</title>
<style>{{ style }}</style></head>
<body>
<header><b>{{ kind.name }}</b> · <span id="progress">item {{ index + 1 }} of {{ rows|length }}</span> ·
 <span id="done">{{ done }} decided</span> · decisions in <code>{{ decisions }}</code>
<div id="status" class="{{ 'decided-keep' if state == 'keep' else 'decided-reject' if state == 'reject' else '' }}">
 {% if state %}decided: <b>{{ state }}</b>{% if row[kind.column] and kind.keep is none and state == 'keep' %} ({{ row[kind.column] }}){% endif %}{% else %}not decided{% endif %}</div>
{% if error %}<div class="error" id="error">{{ error }}</div>{% endif %}</header>
<div class="field"><div class="name">{{ kind.key|join(' · ') }}</div><div class="value">{% for c in kind.key %}{{ row[c] }}{% if not loop.last %} · {% endif %}{% endfor %}</div></div>
{% for c in kind.show if row.get(c) %}
<div class="field" data-column="{{ c }}"><div class="name">{{ c }}</div><div class="value">{{ row[c] }}</div></div>
{% endfor %}
{% if question_images %}<div class="question-images" id="question-images"><div class="name">the question's images</div>
{% for sha in question_images %}<a href="{{ url_for('image', sha=sha) }}" target="_blank"><img src="{{ url_for('image', sha=sha) }}" alt="question image {{ loop.index }}"></a>{% endfor %}</div>{% endif %}
<form method="post" id="form">
<input type="hidden" name="csrf" value="{{ csrf }}">
<div class="entries">
{% for group, members in groups %}
 <h2>{{ headings[group] }} ({{ members|length }})</h2>
 {% for e in members %}
 <div class="entry role-{{ e.role }}" data-role="{{ e.role }}">
  <div class="body">
   <span class="badge">{{ badges[e.role] }}</span><span class="title">{{ e.title }}</span> <span class="modality">{{ e.modality }}</span>
   {% if e.caption %}<div class="caption">{{ e.caption }}</div>{% endif %}
   {% if e.table %}<div class="table">{{ e.table }}</div>{% elif e.text %}<div class="text">{{ e.text }}</div>{% endif %}
   {% if e.decision %}<div class="grounded" data-key="{{ e.key }}">grounded? <kbd>{{ e.key }}</kbd>
    {% for v in ('yes', 'no') %}<label><input type="radio" name="{{ e.decision }}" value="{{ v }}" {{ 'checked' if row.get(e.decision) == v }}> {{ v }}</label>{% endfor %}</div>{% endif %}
  </div>
  {% if e.image %}<div class="crop"><a href="{{ url_for('image', sha=e.image) }}" target="_blank"><img src="{{ url_for('image', sha=e.image) }}" alt="{{ e.title }}"></a></div>{% endif %}
 </div>
 {% endfor %}
{% else %}<p class="name" id="no-entries">{{ empty }}</p>
{% endfor %}
</div>
 <input type="hidden" name="decision" id="decision">
 {% if kind.keep is none %}<div class="name">{{ kind.column }} (kept as typed; reject writes "{{ kind.reject }}")</div>
 <input type="text" name="value" id="value" value="{{ row[kind.column] if row[kind.column] and row[kind.column] != kind.reject else row.get(kind.proposal, '') }}">{% endif %}
 <div class="name">note</div><textarea name="note" id="note" rows="2">{{ row[kind.note] }}</textarea>
 {% if kind.entry_decision %}<p class="hint">Is the fact relevant to the question? <kbd>k</kbd> yes, <kbd>r</kbd> no. Is it grounded
 in each shown document? <kbd>1</kbd>-<kbd>9</kbd> set yes, press again for no (needed for yes).</p>{% endif %}
 <p><button type="button" onclick="decide('keep')">{{ keep_label }} <kbd>k</kbd></button>
 <button type="button" onclick="decide('reject')">{{ reject_label }} <kbd>r</kbd></button>
 <a href="{{ url_for('item', index=index - 1) if index > 0 else '#' }}" id="prev">previous <kbd>p</kbd></a> ·
 <a href="{{ url_for('item', index=index + 1) if index + 1 < rows|length else '#' }}" id="next">next <kbd>n</kbd></a> ·
 <a href="{{ url_for('first_undecided') }}" id="undecided">next undecided <kbd>u</kbd></a> · <kbd>e</kbd> edit note, <kbd>Esc</kbd> leave it</p>
</form>
<script>
function decide(d) { document.getElementById('decision').value = d; document.getElementById('form').submit(); }
function ground(k) {  // a shown document's grounded: unset -> yes -> no -> yes
  const box = document.querySelector('.grounded[data-key="' + k + '"]');
  if (!box) return;
  const [yes, no] = box.querySelectorAll('input');
  if (yes.checked) { no.checked = true; } else { yes.checked = true; }
}
document.addEventListener('keydown', function (ev) {
  const typing = ['TEXTAREA'].includes(document.activeElement.tagName) || document.activeElement.type === 'text';
  if (ev.key === 'Escape') { document.activeElement.blur(); return; }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const go = (id) => { const href = document.getElementById(id).getAttribute('href'); if (href !== '#') location.href = href; };
  const keys = { k: () => decide('keep'), r: () => decide('reject'), n: () => go('next'), ArrowRight: () => go('next'),
                 p: () => go('prev'), ArrowLeft: () => go('prev'), u: () => go('undecided'),
                 e: () => document.getElementById('note').focus() };
  if (keys[ev.key]) { ev.preventDefault(); keys[ev.key](); }
  else if (/^[1-9]$/.test(ev.key)) { ev.preventDefault(); ground(ev.key); }
});
</script>
</body></html>"""

PROBLEM = """<!doctype html>
<html><head><meta charset="utf-8"><title>{{ title }}</title><style>{{ style }}</style></head>
<body><h1 id="problem-title">{{ title }}</h1><p id="problem">{{ problem }}</p>
<p>{{ advice }}</p></body></html>"""

HEADINGS = {"evidence": "Gold evidence", "distractor": "Distractors", "proposed": "Proposed by the parser",
            "chosen": "Typed in the decision", "document": "Shown documents"}
EMPTY = {"quality_control": "no evidence recorded for this item",
         "pairing": "the parser proposes no element for this reference (see problem): type element ids to pair them",
         "annotation": "no document shown for this fact"}
BADGES = {"evidence": "EVIDENCE", "distractor": "DISTRACTOR", "proposed": "PROPOSED", "chosen": "CHOSEN", "document": "DOCUMENT"}


def _labels(kind: SheetKind) -> dict[str, str]:
    """What the two decision buttons say: keep / reject, or the value they write into the column."""
    if kind.keep is None:
        return {"keep_label": "keep as typed", "reject_label": f"reject (writes {kind.reject})"}
    if (kind.keep, kind.reject) == ("keep", "reject"):
        return {"keep_label": "keep", "reject_label": "reject"}
    return {"keep_label": f"{kind.column}: {kind.keep}", "reject_label": f"{kind.column}: {kind.reject}"}


def _hostname(value: str) -> str | None:
    """The host name of a Host header (name[:port]) or an Origin / Referer url."""
    try:
        return urlsplit(value if "//" in value else "//" + value).hostname
    except ValueError:
        return None


def create_app(review: Review, allowed_hosts: tuple[str, ...] = LOCAL_HOSTS) -> Flask:
    app = Flask(__name__)
    app.secret_key = secrets.token_bytes(32)  # a new session (and token) whenever the page is started
    # a cookie name of its own: cookies ignore ports, so two review pages open at once (a sheet per
    # port) would otherwise overwrite each other's session
    app.config.update(SESSION_COOKIE_NAME=f"review-{secrets.token_hex(4)}", SESSION_COOKIE_SAMESITE="Strict", SESSION_COOKIE_HTTPONLY=True)
    allowed = {h.lower() for h in allowed_hosts}

    def problem(status: int, title: str, text: str, advice: str):
        return render_template_string(PROBLEM, title=title, problem=text, advice=advice, style=STYLE), status

    @app.before_request
    def only_from_here():
        if _hostname(request.host) not in allowed:  # DNS rebinding: a foreign name resolving to 127.0.0.1
            return problem(403, "Host not allowed", f"This page answers on {', '.join(sorted(allowed))}, not {request.host!r}.",
                           "Open it at the address the command printed, or start it with --allow-host NAME.")
        if request.method == "POST":
            origin = request.headers.get("Origin") or request.headers.get("Referer")
            if origin is not None and _hostname(origin) not in allowed:
                return problem(403, "Decision refused", f"A decision came from {origin!r}, another site.",
                               "Decisions are taken only from this page itself.")
            if not hmac.compare_digest(request.form.get("csrf", ""), session.get("csrf", "")):
                return problem(403, "Decision refused", "The decision did not carry this page's session token "
                               "(the page was open before the review page restarted, or the request came from elsewhere).",
                               "Reload the page and decide again.")

    @app.errorhandler(SheetProblem)
    def unreadable(err: SheetProblem):
        return problem(422, "The review sheet cannot be read", str(err),
                       "Nothing was written. Fix or move the file, then reload this page.")

    def state(row: dict) -> str:
        value = row[review.kind.column]
        return "" if not value else "reject" if value.lower() == review.kind.reject else "keep"

    @app.get("/")
    def first_undecided():
        rows = review.rows()
        pending = [i for i, row in enumerate(rows) if not state(row)]
        return redirect(url_for("item", index=pending[0] if pending else 0))

    @app.route("/item/<int:index>", methods=["GET", "POST"])
    def item(index: int):
        rows = review.rows()
        if not 0 <= index < len(rows):
            abort(404)
        error = None
        if request.method == "POST":
            grounded = {c: request.form.get(c, "") for c in review.decision_columns()[1:-1]}  # per shown entry (MAVIS)
            try:
                review.decide(index, request.form.get("decision", ""), request.form.get("note", ""), request.form.get("value", ""), grounded)
                return redirect(url_for("item", index=min(index + 1, len(rows) - 1)))
            except ValueError as err:
                error = str(err)
        row = rows[index]
        csrf = session.setdefault("csrf", secrets.token_urlsafe(32))
        groups: dict[str, list[dict]] = {}  # by role, in the order the roles come (gold evidence first)
        for entry in review.entries(row):
            groups.setdefault(entry["role"], []).append(entry)
        return render_template_string(PAGE, kind=review.kind, rows=rows, index=index, row=row, state=state(row), error=error,
                                      done=sum(1 for r in rows if state(r)), decisions=review.decisions, groups=list(groups.items()),
                                      question_images=review.question_images(row), headings=HEADINGS, badges=BADGES,
                                      empty=EMPTY[review.kind.layout],
                                      csrf=csrf, style=STYLE, **_labels(review.kind))

    @app.get("/image/<sha>")
    def image(sha: str):
        found = review.store.find(sha) if sha.isalnum() else None
        if found is None:
            abort(404)
        return send_file(found)

    return app


def main(argv: list[str] | None = None) -> None:
    from werkzeug.serving import make_server

    parser = argparse.ArgumentParser(prog="python -m stages.core.review_app", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sheet", type=Path, help="the exported sheet (review_sheet.csv, pairing_sheet.csv, annotation_sheet.csv)")
    parser.add_argument("--decisions", type=Path, help="the decisions file the config names (default: review/<sheet name>)")
    parser.add_argument("--catalog", type=Path, help="the run's catalog, for images (default: the sheet's run folder's catalog.duckdb)")
    parser.add_argument("--image-store", type=Path, default=Path("data/cache/images"), help="where element crops are stored")
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    parser.add_argument("--port", type=int, default=5000, help="0: any free port")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a host name the page also answers to (127.0.0.1 and localhost always), e.g. behind a tunnel")
    args = parser.parse_args(argv)
    decisions = args.decisions or Path("review") / args.sheet.name
    catalog = args.catalog or args.sheet.resolve().parents[2] / "catalog.duckdb"
    try:
        review = Review(args.sheet, decisions, catalog, args.image_store)
        items = len(review.rows())
    except (OSError, StageError) as err:
        raise SystemExit(str(err)) from None
    hosts = (*LOCAL_HOSTS, *([args.host] if args.host not in ("0.0.0.0", "::") else []), *args.allow_host)
    server = make_server(args.host, args.port, create_app(review, hosts), threaded=True)
    print(f"{review.kind.name}: {items} items; decisions in {decisions} (name it in the config); "
          f"open http://{args.host}:{server.server_port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
