"""Explicit references in paper-related prose ("Table 3", "Section 4.3, Line 39") and citation
brackets ("[1, Figure 2]"): one deterministic parser shared by MCiteBench construction
(extract_explanation_qa, pair_evidence; MCiteBench §3.4) and by evaluation (split_citations).

    >>> [r.label for r in parse_refs("as shown in Tab. 2/3 and Figs. 3(b) and 4, see Section 4.3, Line 39")]
    ['Table 2', 'Table 3', 'Figure 3', 'Figure 4', 'Section 4.3, Line 39']
    >>> [r.label for r in citation_refs("In Figure 1, 3 of the 5 runs fail [2, Fig. 4].")]
    ['Figure 1', '[2]', 'Figure 4']

API (kept small on purpose):
- `parse_refs(text) -> list[Ref]`: every figure/table/section/line/appendix reference in text
  order; a list ("Tables 2/3/4", "Figs. 2 and 3", "Figures 2-4", "Figures 2 to 4") yields one Ref
  per item, each with the span of the whole phrase; integer ranges expand ("Figures 2-4" -> 2, 3,
  4), other ranges keep their two ends.
- `citation_refs(text) -> list[Ref]`: what an answer cites: the items of citation brackets
  (`kind` "index", label "[k]") and the references of `parse_refs` outside them, in text order.
- `citation_brackets(text) -> list[(span, refs)]`: the citation brackets alone.
- `figure_table_refs(text)`, `unique_refs(refs)`: filters.
- `Ref`: `kind` ("figure" | "table" | "section" | "line" | "appendix" | "index"), `number` (str:
  "3", "4.2", "A.1"; None for a bare line reference), `lines` ((first, last) or None), `span`
  ((start, end) in the text), `label` (canonical text, which parses back to the same Ref), `key`.

The grammar of a reference phrase is HEAD ITEM (SEP ITEM)*:
- HEAD: "Figure(s)", "Fig(s)(.)", "Table(s)", "Tab(s)(.)", "Section(s)", "Sec(s).", "§(§)",
  "Appendix/Appendices/App.", "Line(s)/l./ll."; keywords match in any case.
- ITEM: a number, optionally a range ("2-4", "2–4", "2 to 4"); figures may carry a sub-figure
  ("3a", "3(b)", "3 (a-c)"), folded into the figure. Letters inside numbers must be upper case
  ("Table A.2"; "Section 4, we" does not read "W"). A number ends where no digit, decimal part or
  percent sign follows ("Table 3, 85.2%" is one reference).
- SEP: "/", "and", "or", "&" (", and", ", or") continue the list ("Table 2/3/4/5", "Figure 2 and
  3"). A comma or semicolon after a singular head continues it only into an item that closes the
  phrase: one followed by punctuation, a bracket, emphasis marks, the end of the text or a further
  separator and item. So "In Figure 1, 3 of the 5 runs" and "Table 2, 4.1 points higher" stay one
  reference, while "Table 2, 3." and "Tables 2, 3 and 4." are lists. After a plural head
  ("Figures", "Figs.", "Tables", "Tabs.", "Sections", "§§") a comma always continues the list
  ("Figures 2, 3 show"): a plural head announces one.

A citation bracket is "[" ITEM (SEP ITEM)* "]" where an ITEM is a text index ("1", a range "1-3"
or "1 to 3") or a reference phrase of the grammar above, and SEP is "," ";" "&" "/" "and" "or";
inside a bracket "," and ";" after a singular head end the phrase, so a bare number after them is
an index ("[Table 3; 2]", "[2, Fig. 4, 5]"), while "and" still continues it ("[Figure 1 and 3]");
markdown emphasis inside is ignored ("[**1**]"). A bracket that does not parse whole is no
citation ("[Smith et al., 2020]"); a bare year "[2024]" is an index by this grammar.

Conventions: sub-figures fold into their figure; a line suffix joins the section before it
("Section 4.3, Line 39" is one section Ref with lines (39, 39)); "Lines 39-41" alone is a line Ref
with lines (39, 41); numbers that start with a letter ("Table A.2", "Section B.1") are kept as
written: by convention they denote appendix material, and `Ref.lettered` says so.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_LABEL = {"figure": "Figure", "table": "Table", "section": "Section", "line": "Line", "appendix": "Appendix"}

_DASH = r"(?:\s*[-\u2010-\u2015~]\s*|\s+(?:to|through)\s+)"
_SLASH = r"\s*/\s*"
_AND_OR = r"(?:\s*,?\s*(?:and|or)\s+|\s*&\s*)"
_COMMA = r"\s*[,;]\s*"
# Figure/table numbers: "3", "4.2", "A1", "A.2", "S3"; sub-figure suffix "3a", "3(b)", "3 (a-c)".
_FT_NUM = r"(?:(?-i:[A-Z])\.?)?\d+(?:\.\d+)?"
_SUBFIG = r"(?:[a-h](?![A-Za-z])|\s?\([a-h](?:\s*[-,\u2013]\s*[a-h])*\))?"
_SEC_NUM = r"(?:(?-i:[A-Z])(?![A-Za-z])|\d+)(?:\.\d+)*"
_APP_NUM = r"(?-i:[A-Z])(?:\.?\d+)*(?![A-Za-z])|\d+(?:\.\d+)*"
_END = r"(?![\d%]|\.\d)"

_HEADS = {  # (singular, plural); the word boundary is part of the head: "§" is not a word character
    "figure": (r"\b(?:figure|fig\.?)", r"\b(?:figures|figs\.?)"),
    "table": (r"\b(?:table|tab\.?)", r"\b(?:tables|tabs\.?)"),
    "section": (r"(?:\b(?:section|sec\.)|\u00a7(?!\u00a7))", r"(?:\b(?:sections|secs\.)|\u00a7\u00a7)"),
    "appendix": (r"\b(?:appendix|app\.)", r"\bappendices"),
    "line": (r"\b(?:line|l\.)", r"\b(?:lines|ll\.)"),
}
_NUMS = {
    "figure": rf"{_FT_NUM}{_SUBFIG}{_END}",
    "table": rf"{_FT_NUM}{_END}",
    "section": rf"{_SEC_NUM}{_END}",
    "appendix": rf"(?:{_APP_NUM}){_END}",
    "line": rf"\d+{_END}",
}
_RANGE_OK = {"figure", "table", "section", "line"}  # "Figures 2-4", "Lines 39-41", "Sections 3-5"


def _item(kind: str) -> str:
    num = _NUMS[kind]
    return rf"(?:{num}(?:{_DASH}{num})?)" if kind in _RANGE_OK else rf"(?:{num})"


def _kind_pattern(kind: str, bracket: bool = False) -> str:
    item = _item(kind)
    # An item closes the phrase when punctuation, a bracket, emphasis, the end or another item follows.
    closes = rf"(?=\s*(?:[.,;:!?)\]}}*_\"'\u201d]|$)|(?:{_SLASH}|{_AND_OR}|{_COMMA}){item})"
    singular, plural = _HEADS[kind]
    listed = rf"{_SLASH}{item}|{_AND_OR}{item}"
    # Inside a citation bracket "," and ";" separate the bracket's items: "[Table 3; 2]" is Table 3 and [2].
    one = rf"{singular}\s*{item}(?:{listed})*" if bracket else rf"{singular}\s*{item}(?:{listed}|{_COMMA}{item}{closes})*"
    many = rf"{plural}\s*{item}(?:{listed}|{_COMMA}{item})*"
    return rf"(?P<{kind}>{many}|{one})"


_ORDER = ("figure", "table", "section", "appendix", "line")
_HEAD_RE = re.compile("|".join(_kind_pattern(k) for k in _ORDER), re.I)
_BRACKET_HEAD_RE = re.compile("|".join(_kind_pattern(k, bracket=True) for k in _ORDER), re.I)
_ITEM_RE = {k: re.compile(rf"({_NUMS[k]})(?:{_DASH}({_NUMS[k]}))?" if k in _RANGE_OK else rf"({_NUMS[k]})", re.I) for k in _NUMS}
_HEAD_ONLY = {k: re.compile(rf"^\s*(?:{_HEADS[k][1]}|{_HEADS[k][0]})\s*", re.I) for k in _HEADS}
# A line suffix that belongs to the section reference just before it.
_LINE_SUFFIX = re.compile(rf"^(?:\s*,\s*|\s*\(\s*|\s+)(?:lines?|ll?\.)\s*(\d+)(?:{_DASH}(\d+))?{_END}\)?", re.I)

# Citation brackets.
_BRACKET = re.compile(r"\[([^\[\]\n]{1,300})\]")
_EMPHASIS = re.compile(r"\*+|__|`")
_INDEX = re.compile(rf"(\d+)(?:{_DASH}(\d+))?(?![\d.])")
_BRACKET_SEP = re.compile(r"\s*(?:[,;&/]\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+)\s*", re.I)


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
        if self.kind == "index":
            return f"[{self.number}]"
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
    if first.isdecimal() and last.isdecimal() and 0 < int(last) - int(first) <= 20:
        return [str(n) for n in range(int(first), int(last) + 1)]
    return [first, last]


def _phrase_refs(match: re.Match, text: str, span: tuple[int, int] | None = None) -> tuple[list[Ref], int]:
    """The Refs of one matched phrase and where the phrase (with a section's line suffix) ends."""
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
    span = span or (start, end)
    refs = []
    for item in _ITEM_RE[kind].finditer(body):
        if kind == "line":
            first = int(item.group(1))
            refs.append(Ref("line", None, (first, int(item.group(2) or first)), span))
            continue
        last = item.group(2) if kind in _RANGE_OK else None
        for number in _expand(_norm_number(kind, item.group(1)), _norm_number(kind, last) if last else None):
            refs.append(Ref(kind, number, lines, span))
    return refs, end


def parse_refs(text: str) -> list[Ref]:
    """Every explicit reference in `text`, in text order (see the module docstring)."""
    refs: list[Ref] = []
    pos = 0
    while True:
        match = _HEAD_RE.search(text, pos)
        if match is None:
            return refs
        found, pos = _phrase_refs(match, text)
        refs += found


def _bracket_body(body: str, span: tuple[int, int]) -> list[Ref] | None:
    """The items of one bracket's body, or None when the body is not a citation list."""
    body = _EMPHASIS.sub("", body).strip()
    refs: list[Ref] = []
    pos = 0
    while True:
        phrase = _BRACKET_HEAD_RE.match(body, pos)
        if phrase:
            found, pos = _phrase_refs(phrase, body, span)
            refs += found
        else:
            index = _INDEX.match(body, pos)
            if not index:
                return None
            refs += [Ref("index", n, None, span) for n in _expand(index.group(1), index.group(2))]
            pos = index.end()
        if pos == len(body):
            return refs
        sep = _BRACKET_SEP.match(body, pos)
        if not sep or sep.end() == len(body):
            return None
        pos = sep.end()


def citation_brackets(text: str) -> list[tuple[tuple[int, int], list[Ref]]]:
    """Every citation bracket of `text`: its span and its items (see the module docstring)."""
    out = []
    for m in _BRACKET.finditer(text):
        refs = _bracket_body(m.group(1), m.span())
        if refs:
            out.append((m.span(), refs))
    return out


def citation_refs(text: str) -> list[Ref]:
    """Bracket items and the references outside brackets, in text order."""
    brackets = citation_brackets(text)
    inside = [span for span, _ in brackets]
    refs = [r for _, found in brackets for r in found]
    refs += [r for r in parse_refs(text) if not any(a <= r.span[0] < b for a, b in inside)]
    return sorted(refs, key=lambda r: r.span[0])  # stable: a list keeps its own order


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
