"""The review page: every human review sheet (stages/core/review.py) one item at a time in a browser.

    python -m stages.core.review_app data/runs/demo/mcitebench/quality_control/review_sheet.csv

then open the printed address. The page shows an item's fields (question, answer, evidence,
distractors, the judge's scores, the parser's proposal...) and its images, and records keep or
reject with a note into the decisions file: the sheet's own CSV layout with the decision column
filled, exactly what the stage reading it honours (config `mcitebench.review_sheet`,
`mcitebench.pairing_review`). Every decision rewrites the file atomically and every page view
reads it again, so the page and a spreadsheet are interchangeable and a review resumes where it
stopped; rows the exported sheet gained since (a rebuilt run) appear undecided, decisions of rows
it no longer has are dropped.

Keys: k keep, r reject, n / right arrow next, p / left arrow previous, u next undecided, e edit
the note (Escape leaves it). Images come from the run's catalog (element crops in the image store).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import duckdb
from flask import Flask, abort, redirect, render_template_string, request, send_file, url_for

from .images import ImageStore
from .review import SheetKind, read_csv, sheet_kind, write_sheet
from .stage import StageError


class Review:
    """The exported sheet merged with the decisions file, item by item."""

    def __init__(self, sheet: Path, decisions: Path, catalog: Path | None, image_store: Path):
        self.sheet, self.decisions, self.catalog, self.store = sheet, decisions, catalog, ImageStore(image_store)
        self.columns, _ = read_csv(sheet)
        self.kind: SheetKind = sheet_kind(self.columns)

    def key(self, row: dict) -> tuple:
        return tuple(row[c] for c in self.kind.key)

    def rows(self) -> list[dict]:
        """The sheet's rows with the decisions file's decision and note (read on every call)."""
        _, rows = read_csv(self.sheet)
        if self.decisions.exists():
            columns, decided = read_csv(self.decisions)
            missing = [c for c in (*self.kind.key, self.kind.column) if c not in columns]
            if missing:
                raise StageError(f"decisions file {self.decisions} lacks the columns {missing}")
            by_key = {self.key(r): r for r in decided}
            for row in rows:
                if self.key(row) in by_key:
                    row[self.kind.column] = by_key[self.key(row)][self.kind.column]
                    row[self.kind.note] = by_key[self.key(row)].get(self.kind.note, "")
        return rows

    def decide(self, index: int, decision: str, note: str, value: str = "") -> None:
        rows = self.rows()
        kind = self.kind
        if decision == "keep":
            filled = kind.keep if kind.keep is not None else value.strip()
            if not filled:
                raise ValueError(f"keep needs a value for {kind.column}")
        elif decision == "reject":
            filled = kind.reject
        elif decision == "clear":
            filled = ""
        else:
            raise ValueError(f"decision must be keep, reject or clear, got {decision!r}")
        rows[index][kind.column] = filled
        rows[index][kind.note] = note.strip()
        self.decisions.parent.mkdir(parents=True, exist_ok=True)
        write_sheet(self.decisions, self.columns, rows)

    def images(self, row: dict) -> list[tuple[str, str]]:
        """(label, sha256) of the item's images found in the catalog; none without one."""
        if self.kind.images is None or self.catalog is None or not self.catalog.exists():
            return []
        named = [e for c in (self.kind.column, self.kind.proposal) if c for e in row.get(c, "").split() if e.startswith("el:")]
        with duckdb.connect(str(self.catalog), read_only=True) as con:
            try:
                found = con.execute(self.kind.images, {"question_id": row.get("question_id", ""), "elements": named}).fetchall()
            except duckdb.CatalogException:  # a run without these tables
                return []
        seen, out = set(), []
        for label, sha in found:
            if sha not in seen:
                seen.add(sha)
                out.append((label, sha))
        return out


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{{ kind.name }}: {{ index + 1 }} of {{ rows|length }}</title>
<style>
 body { font-family: sans-serif; margin: 1em auto; max-width: 70em; }
 .field { margin: .4em 0; } .name { color: #666; font-size: .85em; } .value { white-space: pre-wrap; }
 .images img { max-height: 18em; max-width: 32em; border: 1px solid #ccc; margin: .2em; }
 .decided-keep { color: #1a7f37; } .decided-reject { color: #c62828; } kbd { border: 1px solid #999; padding: 0 .3em; border-radius: 3px; }
 textarea, input[type=text] { width: 100%; }
</style></head>
<body>
<p><b>{{ kind.name }}</b> · <span id="progress">item {{ index + 1 }} of {{ rows|length }}</span> ·
 <span id="done">{{ done }} decided</span> · decisions in <code>{{ decisions }}</code></p>
<p id="status" class="{{ 'decided-keep' if state == 'keep' else 'decided-reject' if state == 'reject' else '' }}">
 {% if state %}decided: <b>{{ state }}</b>{% if row[kind.column] and kind.keep is none and state == 'keep' %} ({{ row[kind.column] }}){% endif %}{% else %}not decided{% endif %}</p>
{% if error %}<p style="color:#c62828">{{ error }}</p>{% endif %}
<div class="field"><div class="name">{{ kind.key|join(' · ') }}</div><div class="value">{% for c in kind.key %}{{ row[c] }}{% if not loop.last %} · {% endif %}{% endfor %}</div></div>
{% for c in kind.show if row.get(c) %}
<div class="field" data-column="{{ c }}"><div class="name">{{ c }}</div><div class="value">{{ row[c] }}</div></div>
{% endfor %}
<div class="images">{% for label, sha in images %}<figure style="display:inline-block"><img src="{{ url_for('image', sha=sha) }}" alt="{{ label }}"><figcaption>{{ label }}</figcaption></figure>{% endfor %}</div>
<form method="post" id="form">
 <input type="hidden" name="decision" id="decision">
 {% if kind.keep is none %}<div class="name">{{ kind.column }} (kept as typed; reject writes "{{ kind.reject }}")</div>
 <input type="text" name="value" id="value" value="{{ row[kind.column] if row[kind.column] and row[kind.column] != kind.reject else row.get(kind.proposal, '') }}">{% endif %}
 <div class="name">note</div><textarea name="note" id="note" rows="2">{{ row[kind.note] }}</textarea>
 <p><button type="button" onclick="decide('keep')">keep <kbd>k</kbd></button>
 <button type="button" onclick="decide('reject')">reject <kbd>r</kbd></button>
 <a href="{{ url_for('item', index=index - 1) if index > 0 else '#' }}" id="prev">previous <kbd>p</kbd></a> ·
 <a href="{{ url_for('item', index=index + 1) if index + 1 < rows|length else '#' }}" id="next">next <kbd>n</kbd></a> ·
 <a href="{{ url_for('first_undecided') }}" id="undecided">next undecided <kbd>u</kbd></a> · <kbd>e</kbd> edit note, <kbd>Esc</kbd> leave it</p>
</form>
<script>
function decide(d) { document.getElementById('decision').value = d; document.getElementById('form').submit(); }
document.addEventListener('keydown', function (ev) {
  const typing = ['TEXTAREA', 'INPUT'].includes(document.activeElement.tagName);
  if (ev.key === 'Escape') { document.activeElement.blur(); return; }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  const go = (id) => { const href = document.getElementById(id).getAttribute('href'); if (href !== '#') location.href = href; };
  const keys = { k: () => decide('keep'), r: () => decide('reject'), n: () => go('next'), ArrowRight: () => go('next'),
                 p: () => go('prev'), ArrowLeft: () => go('prev'), u: () => go('undecided'),
                 e: () => document.getElementById('note').focus() };
  if (keys[ev.key]) { ev.preventDefault(); keys[ev.key](); }
});
</script>
</body></html>"""


def create_app(review: Review) -> Flask:
    app = Flask(__name__)

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
            try:
                review.decide(index, request.form["decision"], request.form.get("note", ""), request.form.get("value", ""))
                return redirect(url_for("item", index=min(index + 1, len(rows) - 1)))
            except ValueError as err:
                error = str(err)
        row = rows[index]
        return render_template_string(PAGE, kind=review.kind, rows=rows, index=index, row=row, state=state(row), error=error,
                                      done=sum(1 for r in rows if state(r)), decisions=review.decisions, images=review.images(row))

    @app.get("/image/<sha>")
    def image(sha: str):
        found = review.store.find(sha) if sha.isalnum() else None
        if found is None:
            abort(404)
        return send_file(found)

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m stages.core.review_app", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sheet", type=Path, help="the exported sheet (review_sheet.csv, pairing_sheet.csv)")
    parser.add_argument("--decisions", type=Path, help="the decisions file the config names (default: review/<sheet name>)")
    parser.add_argument("--catalog", type=Path, help="the run's catalog, for images (default: the sheet's run folder's catalog.duckdb)")
    parser.add_argument("--image-store", type=Path, default=Path("data/cache/images"), help="where element crops are stored")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000)
    args = parser.parse_args(argv)
    decisions = args.decisions or Path("review") / args.sheet.name
    catalog = args.catalog or args.sheet.resolve().parents[2] / "catalog.duckdb"
    try:
        review = Review(args.sheet, decisions, catalog, args.image_store)
    except (OSError, StageError) as err:
        raise SystemExit(str(err)) from None
    print(f"{review.kind.name}: {len(review.rows())} items; decisions in {decisions} "
          f"(name it in the config); open http://{args.host}:{args.port}/", flush=True)
    create_app(review).run(host=args.host, port=args.port)


if __name__ == "__main__":
    main()
