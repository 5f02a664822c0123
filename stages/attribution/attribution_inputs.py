"""Read the attribution items (cite-while-you-generate.txt §3.1 problem setup, §4.1 data, Table 1,
App. B) from any of three inputs, one attr_items table (ids unique across them):

`jsonl`: the project's own format, one object per line:

    {"id": "dlg-1",                                   required, unique, not blank
     "source": "Doctor: ... Patient: ... <image> ...",  required: the text to summarise; at most
                                                        one <image> placeholder marks where the
                                                        image stood in the source
     "image": "images/eye.png",                       optional, relative to the JSONL file and under
                                                        its folder
     "image_description": "a photo of a red eye",     optional, shown to the reference judge
     "reference": {                                   optional
        "summary": "reference summary for ROUGE",
        "citations": [{"sentence": "a summary sentence", "sources": [0, 2, "IMG"]}]}}

Lines end at "\n" only (a "\r" before it is dropped; U+2028, U+0085 and the like are text inside
a JSON string), and a line's leading byte-order mark is dropped. An image name is resolved
(symbolic links followed) and must stay under the JSONL file's folder: "/etc/passwd" or
"../x.png" is image_missing. Reference citations are gold sources of summary sentences; the
scorer matches them to generated sentences by their text (lower-cased, punctuation removed) and
asks the judge about the rest.

`cliconsummation`: a folder holding the (MM-)CliConSummation dialogue sheets as released, the
seed's doctor-patient dialogues (Tiwari et al. 2023; credentialed, not bundled):

    <folder>/*.csv     UTF-8 (a BOM is dropped), read in name order; per dialogue a block of rows:
                         Patient,Doctor,Symptom,Visual,Severity,Intent,Summary,MCS,DI   (a header row)
                         Dialogue ID,<id>
                         <patient utterance>,<doctor utterance>,<BIO tags>,<visual>,<severity>,...,<summary>,...
                         ... one row per turn; the first turn holds the summaries ...
                         Disease: <name>, Group: <n>                                     (the label row)
                       an utterance shows its image as $<file>$, e.g. "Please see $S22_3_1.jpg$."
    <folder>/Visuals/  the image files the utterances name (a name leaving Visuals/ is image_missing)

Item `cliconsummation:<id>`: the source is one line per utterance, "Patient: ..." then "Doctor:
...", turn by turn (the label row is left out: it names the diagnosis; unquoted, its "Group: <n>"
is a second cell); the image marker leaves the utterance and the <image> placeholder follows it
on a line of its own (where the image was shown, splitting no sentence), the turn's Visual and
Severity cells its description ("Redness in ear, mild"), the Summary cell the reference summary.
A dialogue naming more than one image is rejected (several_images; MM-CliConSummation's own
preprocessing drops them too). Table 1's
selection, 100 text-only + 263 multimodal dialogues, is `cliconsummation_text_only` and
`cliconsummation_multimodal`: the first ones in sheet order (the seed does not say how it chose
them); the rest are rejected over_quota (0 = no cap).

`mimic_cxr`: a folder in MIMIC-CXR's layout (Johnson et al. 2019; credentialed, not bundled):

    <folder>/files/p<NN>/p<subject>/s<study>.txt            free-text reports (mimic-cxr-reports)
    <folder>/files/p<NN>/p<subject>/s<study>/<dicom>.jpg    the study's images (mimic-cxr-jpg), optional

App. B's filter, in order: (1) patients with a single report only (several_reports: each report
of a patient with more); (2) the FINDINGS and IMPRESSION sections, read by their "NAME:" headers
up to the next header (missing_section); (3) at least `mimic_min_findings_sentences` (9) sentences
in FINDINGS and `mimic_min_impression_sentences` (5) in IMPRESSION (too_few_sentences). Item
`mimic-cxr:<study>`: the source is FINDINGS (wrapped lines joined), the reference summary
IMPRESSION, the FINDINGS -> IMPRESSION task of §4.1 (a report's leading BOM is dropped). The
seed's MIMIC-CXR set is text-only; `mimic_images` true attaches the study's first image (by file
name) after the findings, and a study without one is rejected image_missing.

Source sentences are split after . ! ? and at line breaks (stages/attribution/attribution.py), for the
filter's counts as for the attribution.

Inputs: jsonl, cliconsummation, mimic_cxr (each optional; at least one). An error line naming the
file or folder, not rejects: an input holding no item (the wrong path, most likely: a blank items
file, a folder without dialogues or reports), an items file or sheet that is not UTF-8, a sheet
whose quote is never closed (it would swallow the rest of the sheet into one cell) or whose quoted
cell runs on past its closing quote. Output: source_items (attr_items), one row per kept item.
Rejects: bad_json, bad_field (a missing, blank or mistyped field, a source id out of range),
duplicate_id, empty_source (no sentence), image_missing (the file is not there, or not under its
folder), bad_placeholder (more than one <image>); bad_block (a CliConSummation block without its
"Dialogue ID" row), several_images, over_quota; several_reports, missing_section, too_few_sentences, unreadable (a
report that is not UTF-8 text). Invariant: lines / dialogues / reports = rows + rejects.
"""
from __future__ import annotations

import collections
import csv
import json
import re
from pathlib import Path

from stages.attribution.attribution import IMG, split_source
from stages.core.images import is_named_file
from stages.core.stage import Input, Output, Param, Reject, Stage, StageError
from stages.core.schema_check import read_json

VERSION = "3"
SHEET_HEADER = ("Patient", "Doctor")  # the first two cells of a CliConSummation block's header row
SHEET_COLUMNS = 9  # Patient, Doctor, Symptom, Visual, Severity, Intent, Summary, MCS, DI
_IMAGE_MARK = re.compile(r"\$\s*([^$\s][^$]*?)\s*\$")  # "$S22_3_1.jpg$"
_SPACE_BEFORE_STOP = re.compile(r"\s+([.,;:!?])")  # "see ." once the image marker is out
_LABEL_ROW = re.compile(r"^Disease\s*[:;]")  # "Disease: Gout, Group: 13" (the sheets also write "Disease;")
_LABEL_GROUP = re.compile(r"^Group\s*[:;]")  # the label row's "Group: 13", in the next cell when it is not quoted
_SECTION = re.compile(r"^\s*([A-Z][A-Z &/,()-]*[A-Z)])\s*:(.*)$")  # a report's "FINDINGS:" header line


def _field(record: dict, name: str, kind: type, required: bool = False):
    value = record.get(name)
    if value is None:
        if required:
            raise Reject("bad_field", f"{name!r} is missing")
        return None
    if not isinstance(value, kind):
        raise Reject("bad_field", f"{name!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def image_under(folder: Path, name: str) -> Path:
    """folder/name resolved, which must stay under folder (no "/etc/passwd", no "../x.png")."""
    try:
        path = (folder / name).resolve()
        inside = path.is_relative_to(folder.resolve())
    except (OSError, ValueError) as err:  # a name no file can have (a NUL)
        raise Reject("image_missing", f"image {name[:300]!r}: {err}") from None
    if not inside:
        raise Reject("image_missing", f"image {name[:300]!r} is not under {folder}")
    return path


def item(item_id: str, source: str, image: Path | None, description: str | None, summary: str | None) -> dict:
    """One attr_items row, without reference citations: the source's sentences and where its
    <image> placeholder stood (after the last sentence when the source has none)."""
    try:
        sentences, position = split_source(source)
    except ValueError as err:
        raise Reject("bad_placeholder", str(err)) from None
    if not sentences:
        raise Reject("empty_source", "the source has no sentence")
    if image is not None and not is_named_file(image):
        raise Reject("image_missing", f"image {str(image)[:300]} is not a file")
    return {"id": item_id, "source": source, "sentences": sentences, "image": str(image) if image else None,
            "image_position": (position if position is not None else len(sentences)) if image else None,
            "image_description": description, "reference_summary": summary, "reference_citations": []}


# ---- jsonl: the project's own format --------------------------------------------------------------
def _citations(reference: dict, n_sentences: int, has_image: bool) -> list[dict]:
    citations = reference.get("citations")
    if citations is not None and not isinstance(citations, list):
        raise Reject("bad_field", f"reference.citations must be a list, got {type(citations).__name__}")
    out = []
    for i, entry in enumerate(citations or []):
        if not isinstance(entry, dict) or not isinstance(entry.get("sentence"), str) or not isinstance(entry.get("sources"), list):
            raise Reject("bad_field", f"reference.citations[{i}] must be {{sentence: str, sources: list}}")
        sources = []
        for s in entry["sources"]:
            if s == IMG and has_image:
                sources.append(IMG)
            elif isinstance(s, int) and not isinstance(s, bool) and 0 <= s < n_sentences:
                sources.append(str(s))
            else:
                raise Reject("bad_field", f"reference.citations[{i}] cites {s!r}: not a source sentence id 0-{n_sentences - 1}"
                             + (" or IMG" if has_image else ""))
        out.append({"sentence": entry["sentence"], "sources": sources})
    return out




def parse_item(record, base: Path) -> dict:
    if not isinstance(record, dict):
        raise Reject("bad_field", "a line must hold a JSON object")
    item_id = _field(record, "id", str, required=True)
    if not item_id.strip():
        raise Reject("bad_field", "'id' is blank")
    source = _field(record, "source", str, required=True)
    image = _field(record, "image", str)
    reference = _field(record, "reference", dict) or {}
    summary = reference.get("summary")
    if summary is not None and not isinstance(summary, str):
        raise Reject("bad_field", "reference.summary must be a string")
    row = item(item_id, source, image_under(base, image) if image else None, _field(record, "image_description", str), summary)
    row["reference_citations"] = _citations(reference, len(row["sentences"]), row["image"] is not None)
    return row


def read_jsonl(ctx, path: Path):
    """(item key, function making its row) per non-empty line: lines end at "\n" only, as JSONL's
    do (str.splitlines would also split at a U+2028 inside a JSON string)."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            lines = fh.read().split("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise StageError(f"cannot read items {path}: {err}") from None
    for number, line in enumerate(lines, 1):
        line = line.removeprefix("\ufeff").removesuffix("\r")  # a BOM (a file saved with one), a CRLF line end
        if line.strip():
            yield f"{path.name}:{number}", lambda line=line, number=number: _parse_line(line, number, path.parent)


def _parse_line(line: str, number: int, base: Path) -> dict:
    try:
        record = read_json(line)
    except ValueError as err:  # not JSON, or nested too deep to read
        where = f"{err.msg} at char {err.pos}" if isinstance(err, json.JSONDecodeError) else str(err)
        raise Reject("bad_json", f"line {number}: {where}") from None
    return parse_item(record, base)


# ---- cliconsummation: the released dialogue sheets --------------------------------------------------
def sheet_blocks(folder: Path):
    """(<sheet>:<row of its header>, rows) per dialogue block of every sheet in name order: the rows
    after a header row, up to the next one (non-blank rows before a sheet's first header make a
    block of their own). Rows are CSV records: a quoted cell may span lines, but a quote never closed
    (which would swallow the rest of the sheet into one cell) is an error naming the sheet."""
    for sheet in sorted(folder.glob("*.csv")):
        try:
            with open(sheet, newline="", encoding="utf-8-sig") as fh:
                reader = csv.reader(fh, strict=True)
                rows = list(reader)
        except csv.Error as err:
            raise StageError(f"cannot read CliConSummation sheet {sheet}: line {reader.line_num}: {err}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise StageError(f"cannot read CliConSummation sheet {sheet}: {err}") from None
        block, start = [], 1
        for number, row in enumerate(rows, 1):
            if tuple(c.strip() for c in row[:2]) == SHEET_HEADER:
                if any(c.strip() for r in block for c in r):
                    yield f"{sheet.name}:{start}", block
                block, start = [], number
            else:
                block.append(row)
        if any(c.strip() for r in block for c in r):
            yield f"{sheet.name}:{start}", block


def dialogue(block: list[list[str]], visuals: Path) -> dict:
    """One dialogue block as an item: utterances in turn order, its one image as the placeholder."""
    rows = [[" ".join(c.split()) for c in row] + [""] * (SHEET_COLUMNS - len(row)) for row in block]
    rows = [r for r in rows if any(r)]
    if not rows or rows[0][0] != "Dialogue ID" or not rows[0][1]:
        raise Reject("bad_block", f"the block does not start with a 'Dialogue ID,<id>' row: {rows[0][:2] if rows else []}")
    lines, images, description, summary = [], [], None, None
    for patient, doctor, _symptom, visual, severity, _intent, summary_cell, *_ in rows[1:]:
        if _LABEL_ROW.match(patient) and (not doctor or _LABEL_GROUP.match(doctor)):
            continue  # the diagnosis label, not an utterance
        summary = summary or summary_cell or None
        for speaker, text in (("Patient", patient), ("Doctor", doctor)):
            marks = _IMAGE_MARK.findall(text)
            text = _SPACE_BEFORE_STOP.sub(r"\1", " ".join(_IMAGE_MARK.sub("", text).split()))
            if text:
                lines.append(f"{speaker}: {text}")
            if marks:  # the placeholder after the utterance that shows it, so it splits no sentence
                images += marks
                description = ", ".join(v for v in (visual, severity.lower()) if v) or None
                lines.append("<image>")
    if len(images) > 1:
        raise Reject("several_images", f"the dialogue shows {len(images)} images ({', '.join(images)}); an item holds one")
    return item(f"cliconsummation:{rows[0][1]}", "\n".join(lines), image_under(visuals, images[0]) if images else None,
                description, summary)


def read_cliconsummation(ctx, folder: Path):
    quota = {False: ctx.params["cliconsummation_text_only"], True: ctx.params["cliconsummation_multimodal"]}
    taken = collections.Counter()

    def parse(block):
        row = dialogue(block, folder / "Visuals")
        multimodal = row["image"] is not None
        if quota[multimodal] and taken[multimodal] >= quota[multimodal]:
            raise Reject("over_quota", f"Table 1 takes {quota[multimodal]} {'multimodal' if multimodal else 'text-only'} dialogues")
        taken[multimodal] += 1
        return row
    for where, block in sheet_blocks(folder):
        yield f"cliconsummation:{where}", lambda block=block: parse(block)


# ---- mimic_cxr: the reports and App. B's filter --------------------------------------------------
def report_sections(text: str) -> dict[str, str]:
    """Section name -> its text (wrapped lines joined, white space collapsed), each from its
    "NAME:" header line up to the next header; a repeated header continues its section."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        header = _SECTION.match(line)
        if header:
            current = header.group(1).strip()
            sections.setdefault(current, []).append(header.group(2))
        elif current is not None:
            sections[current].append(line)
    return {name: " ".join(" ".join(lines).split()) for name, lines in sections.items()}


def report(path: Path, reports_of_patient: int, params: dict) -> dict:
    """One report through App. B's three steps, as a FINDINGS -> IMPRESSION item."""
    if reports_of_patient > 1:  # step 1: an impression may refer to the patient's earlier studies
        raise Reject("several_reports", f"patient {path.parent.name} has {reports_of_patient} reports")
    try:
        sections = report_sections(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError) as err:
        raise Reject("unreadable", str(err)) from None
    missing = [name for name in ("FINDINGS", "IMPRESSION") if not sections.get(name)]
    if missing:  # step 2
        raise Reject("missing_section", f"no {' or '.join(missing)} section")
    findings, impression = sections["FINDINGS"], sections["IMPRESSION"]
    counts = len(split_source(findings)[0]), len(split_source(impression)[0])
    least = params["mimic_min_findings_sentences"], params["mimic_min_impression_sentences"]
    if counts[0] < least[0] or counts[1] < least[1]:  # step 3
        raise Reject("too_few_sentences", f"FINDINGS has {counts[0]} sentences (at least {least[0]}), IMPRESSION {counts[1]} "
                                          f"(at least {least[1]})")
    image = None
    if params["mimic_images"]:
        study = path.with_suffix("")
        image = min(study.glob("*.jpg"), default=study / "(no .jpg image)")
    return item(f"mimic-cxr:{path.stem}", findings, image, None, impression)


def read_mimic_cxr(ctx, folder: Path):
    reports = sorted(folder.glob("files/p*/p*/s*.txt"))
    per_patient = collections.Counter(path.parent.name for path in reports)
    for path in reports:
        yield f"mimic-cxr:{path.parent.name}/{path.stem}", lambda path=path: report(path, per_patient[path.parent.name], ctx.params)


READERS = {"jsonl": (read_jsonl, "non-blank line"), "cliconsummation": (read_cliconsummation, "dialogue in a *.csv sheet"),
           "mimic_cxr": (read_mimic_cxr, "report files/p*/p*/s*.txt")}  # the reader, what its input holds per item


def run(ctx):
    given = [name for name in READERS if ctx.has_input(name)]
    if not given:
        raise StageError("no items: give jsonl, cliconsummation or mimic_cxr")
    seen: set[str] = set()
    for name in given:
        path, (read, per_item) = Path(ctx.input_path(name)), READERS[name]
        items = 0
        for key, make_row in read(ctx, path):
            items += 1
            with ctx.item(key):
                row = make_row()
                if row["id"] in seen:
                    raise Reject("duplicate_id", f"id {row['id']!r} appears again ({key})")
                seen.add(row["id"])
                ctx.stats[f"items[{name}]"] += 1
                ctx.stats["with_image"] += row["image"] is not None
                ctx.stats["with_reference_citations"] += bool(row["reference_citations"])
                ctx.write("source_items", [row])
        if not items:  # the wrong file or folder, most likely
            raise StageError(f"no items in {name} {path}: it holds no {per_item}")


STAGE = Stage(
    name="attribution_inputs",
    version=VERSION,
    doc=__doc__,
    inputs={
        "jsonl": Input("the items as JSONL (format in the module doc)", optional=True, kind="file"),
        "cliconsummation": Input("a folder of CliConSummation dialogue sheets (*.csv, Visuals/; layout in the module doc)",
                                 optional=True, kind="dir"),
        "mimic_cxr": Input("a folder in MIMIC-CXR's layout (files/p<NN>/p<subject>/s<study>.txt; module doc)", optional=True, kind="dir"),
    },
    outputs={"source_items": Output("attr_items", "one row per kept item")},
    params={
        "cliconsummation_text_only": Param(int, 100, "text-only CliConSummation dialogues kept, in sheet order (Table 1: 100; 0 = all)",
                                           min=0),
        "cliconsummation_multimodal": Param(int, 263, "multimodal CliConSummation dialogues kept, in sheet order (Table 1: 263; 0 = all)",
                                            min=0),
        "mimic_min_findings_sentences": Param(int, 9, "App. B step 3: sentences a report's FINDINGS needs at least", min=0),
        "mimic_min_impression_sentences": Param(int, 5, "App. B step 3: sentences a report's IMPRESSION needs at least", min=0),
        "mimic_images": Param(bool, False, "attach each MIMIC-CXR study's first image (the seed's MIMIC-CXR set is text-only)"),
    },
    run=run,
    rejects={
        "bad_json": "the line is not JSON",
        "bad_field": "a field is missing, blank (an id) or mistyped, or a citation names a source sentence out of range",
        "duplicate_id": "the id appeared on an earlier line (the first is kept)",
        "empty_source": "the source has no sentence",
        "image_missing": "the image file is not there, or not under the items file's folder (Visuals/ for CliConSummation)",
        "bad_placeholder": "the source holds more than one <image> placeholder",
                "bad_block": 'a CliConSummation sheet block without its "Dialogue ID" row',
                "several_images": "the dialogue shows more than one image (the seed's items have at most one)",
                "over_quota": "beyond Table 1's text-only / multimodal dialogue counts",
                "several_reports": "App. B step 1: the MIMIC-CXR patient has more than one report",
                "missing_section": "App. B step 2: the report has no FINDINGS or no IMPRESSION section",
                "too_few_sentences": "App. B step 3: FINDINGS under 9 or IMPRESSION under 5 sentences",
                "unreadable": "the report file is not UTF-8 text",
    },
)

if __name__ == "__main__":
    STAGE.main()
