"""Explicit references in paper-related prose ("Table 3", "Section 4.3, Line 39"): one deterministic
parser shared by MCiteBench construction (extract_explanation_qa, pair_evidence; MCiteBench §3.4)
and by evaluation (figure/table citations in model responses).

    >>> [r.label for r in parse_refs("as shown in Tab. 2/3 and Figs. 3(b) and 4, see Section 4.3, Line 39")]
    ['Table 2', 'Table 3', 'Figure 3', 'Figure 4', 'Section 4.3, Line 39']

API (kept small on purpose):
- `parse_refs(text) -> list[Ref]`: every reference in text order; a list ("Tables 2/3/4",
  "Figs. 2 and 3", "Figures 2-4") yields one Ref per item, each with the span of the whole phrase;
  integer ranges expand ("Figures 2-4" -> 2, 3, 4), other ranges keep their two ends.
- `figure_table_refs(text) -> list[Ref]`: only figures and tables.
- `unique_refs(refs) -> list[Ref]`: first occurrence of each distinct `key`, order kept.
- `Ref`: `kind` ("figure" | "table" | "section" | "line" | "appendix"), `number` (str: "3", "4.2",
  "A.1"; None for a bare line reference), `lines` ((first, last) or None), `span` ((start, end) in
  the text), `label` (canonical text, which parses back to the same Ref), `key` (kind, number, lines).

Conventions: sub-figures fold into their figure ("Figure 3a", "Fig. 3(b)" -> Figure 3); a line
suffix joins the section before it ("Section 4.3, Line 39" is one section Ref with lines (39, 39));
"Lines 39-41" alone is a line Ref with lines (39, 41); numbers that start with a letter
("Table A.2", "Section B.1") are kept as written: by convention they denote appendix material, and
`Ref.lettered` says so. Keywords match in any case; letters inside numbers must be upper case.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = {"figure": "Figure", "table": "Table", "section": "Section", "line": "Line", "appendix": "Appendix"}

_DASH = r"\s*[-\u2010-\u2015~]\s*"
_SEP = r"(?:\s*,\s*(?:and\s+)?|\s*/\s*|\s*&\s*|\s+and\s+|\s+or\s+)"
# Figure/table numbers: "3", "4.2", "A1", "A.2", "S3"; sub-figure suffix "3a", "3(b)", "3 (a-c)".
_FT_NUM = r"(?:(?-i:[A-Z])\.?)?\d+(?:\.\d+)?"
_SUBFIG = r"(?:[a-h](?![A-Za-z])|\s?\([a-h](?:\s*[-,\u2013]\s*[a-h])*\))?"
_SEC_NUM = r"(?:(?-i:[A-Z])(?![A-Za-z])|\d+)(?:\.\d+)*"
_APP_NUM = r"(?-i:[A-Z])(?:\.?\d+)*(?![A-Za-z])|\d+(?:\.\d+)*"
# A number ends where no digit, decimal part or percent sign follows ("Table 3, 85.2%" is one ref;
# letters in numbers are case-sensitive so "Section 4, we" does not read "W" as a section).
_END = r"(?![\d%]|\.\d)"

_HEADS = {  # the word boundary is part of the head: "§" is not a word character
    "figure": r"\b(?:figures?|figs?\.?)",
    "table": r"\b(?:tables?|tabs?\.)",
    "section": r"(?:\b(?:sections?|secs?\.)|\u00a7\u00a7?)",
    "appendix": r"\b(?:appendix|appendices|app\.)",
    "line": r"\b(?:lines?|ll?\.)",
}
_NUMS = {
    "figure": rf"{_FT_NUM}{_SUBFIG}{_END}",
    "table": rf"{_FT_NUM}{_END}",
    "section": rf"{_SEC_NUM}{_END}",
    "appendix": rf"(?:{_APP_NUM}){_END}",
    "line": rf"\d+{_END}",
}
_RANGE_OK = {"figure", "table", "section", "line"}  # "Figures 2-4", "Lines 39-41", "Sections 3-5"


def _kind_pattern(kind: str) -> str:
    num = _NUMS[kind]
    item = rf"{num}(?:{_DASH}{num})?" if kind in _RANGE_OK else num
    return rf"(?P<{kind}>{_HEADS[kind]}\s*(?:{item})(?:{_SEP}(?:{item}))*)"


_HEAD_RE = re.compile("|".join(_kind_pattern(k) for k in ("figure", "table", "section", "appendix", "line")), re.I)
_ITEM_RE = {k: re.compile(rf"({_NUMS[k]})(?:{_DASH}({_NUMS[k]}))?" if k in _RANGE_OK else rf"({_NUMS[k]})", re.I) for k in _NUMS}
_HEAD_ONLY = {k: re.compile(rf"^\s*{_HEADS[k]}\s*", re.I) for k in _HEADS}
# A line suffix that belongs to the section reference just before it.
_LINE_SUFFIX = re.compile(rf"^(?:\s*,\s*|\s*\(\s*|\s+)(?:lines?|ll?\.)\s*(\d+)(?:{_DASH}(\d+))?{_END}\)?", re.I)


@dataclass(frozen=True)
class Ref:
    kind: str
    number: str | None
    lines: tuple[int, int] | None
    span: tuple[int, int]

    @property
    def key(self) -> tuple:
        return (self.kind, self.number, self.lines)

    @property
    def lettered(self) -> bool:
        """A letter-prefixed number ("A.1", "B2"): appendix material by convention."""
        return bool(self.number) and self.number[0].isalpha()

    @property
    def label(self) -> str:
        if self.kind == "line":
            return _lines_text(self.lines)
        text = f"{_LABEL[self.kind]} {self.number}"
        return f"{text}, {_lines_text(self.lines)}" if self.lines else text


def _lines_text(lines: tuple[int, int]) -> str:
    return f"Line {lines[0]}" if lines[0] == lines[1] else f"Lines {lines[0]}-{lines[1]}"


def _norm_number(kind: str, raw: str) -> str:
    """Canonical number: sub-figure letter dropped, letter upper-cased ("a.1" -> "A.1")."""
    raw = raw.strip()
    if kind == "figure":
        raw = re.sub(r"\s?\(.*\)$", "", raw)
        raw = re.sub(r"(?<=\d)[a-h]$", "", raw, flags=re.I)
    return raw[0].upper() + raw[1:] if raw and raw[0].isalpha() else raw


def _expand(first: str, last: str | None) -> list[str]:
    """A range "2-4" of plain integers becomes 2, 3, 4; anything else stays as its two ends."""
    if last is None:
        return [first]
    if first.isdigit() and last.isdigit() and 0 < int(last) - int(first) <= 20:
        return [str(n) for n in range(int(first), int(last) + 1)]
    return [first, last]


def parse_refs(text: str) -> list[Ref]:
    """Every explicit reference in `text`, in text order (see the module docstring)."""
    refs: list[Ref] = []
    pos = 0
    while True:
        match = _HEAD_RE.search(text, pos)
        if match is None:
            return refs
        kind = match.lastgroup
        start, end = match.span()
        phrase = match.group(0)
        body = phrase[_HEAD_ONLY[kind].match(phrase).end():]
        lines = None
        if kind == "section":
            suffix = _LINE_SUFFIX.match(text[end:])
            if suffix:
                lines = (int(suffix.group(1)), int(suffix.group(2) or suffix.group(1)))
                end += suffix.end()
        for item in _ITEM_RE[kind].finditer(body):
            if kind == "line":
                first = int(item.group(1))
                refs.append(Ref("line", None, (first, int(item.group(2) or first)), (start, end)))
                continue
            last = item.group(2) if kind in _RANGE_OK else None
            for number in _expand(_norm_number(kind, item.group(1)), _norm_number(kind, last) if last else None):
                refs.append(Ref(kind, number, lines, (start, end)))
        pos = end


def figure_table_refs(text: str) -> list[Ref]:
    """Only the figure and table references of `text`, in text order."""
    return [r for r in parse_refs(text) if r.kind in ("figure", "table")]


def unique_refs(refs: list[Ref]) -> list[Ref]:
    seen: set[tuple] = set()
    out = []
    for ref in refs:
        if ref.key not in seen:
            seen.add(ref.key)
            out.append(ref)
    return out
