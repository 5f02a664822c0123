"""The shared explicit-reference parser (stages/core/refs.py)."""
import doctest

import pytest
from hypothesis import given, strategies as st

from stages.core import refs
from stages.core.refs import figure_table_refs, parse_refs, unique_refs


def labels(text):
    return [r.label for r in parse_refs(text)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Table 3", ["Table 3"]),
        ("as in Tab. 3.", ["Table 3"]),
        ("Figure 2", ["Figure 2"]),
        ("see Fig. 2", ["Figure 2"]),
        ("Figs. 2 and 3", ["Figure 2", "Figure 3"]),
        ("Figures 2 and 3", ["Figure 2", "Figure 3"]),
        ("Figure 2, Figure 3", ["Figure 2", "Figure 3"]),
        ("Figure 3a", ["Figure 3"]),
        ("Fig. 3(b)", ["Figure 3"]),
        ("figure 3 (a-c)", ["Figure 3"]),
        ("Table 2/3/4/5", ["Table 2", "Table 3", "Table 4", "Table 5"]),
        ("Tables 2, 3 and 4.", ["Table 2", "Table 3", "Table 4"]),
        ("Figures 2-4", ["Figure 2", "Figure 3", "Figure 4"]),
        ("Section 4.2", ["Section 4.2"]),
        ("Sec. 4.2", ["Section 4.2"]),
        ("\u00a74.2", ["Section 4.2"]),
        ("\u00a7\u00a74.2 and 4.3", ["Section 4.2", "Section 4.3"]),
        ("Section 4.3, Line 39", ["Section 4.3, Line 39"]),
        ("Section 4.3 (Lines 39-41)", ["Section 4.3, Lines 39-41"]),
        ("Line 39", ["Line 39"]),
        ("Lines 39-41", ["Lines 39-41"]),
        ("lines 39\u201341", ["Lines 39-41"]),
        ("Appendix A.1", ["Appendix A.1"]),
        ("Table A.2 in Appendix B", ["Table A.2", "Appendix B"]),
        ("Table 4.2 illustrates", ["Table 4.2"]),
    ],
)
def test_forms(text, expected):
    assert labels(text) == expected


def test_typed_fields_and_spans():
    text = "We added results in Table 2 and discussed them in Section 4.3, Line 39."
    table, section = parse_refs(text)
    assert (table.kind, table.number, table.lines) == ("table", "2", None)
    assert text[slice(*table.span)] == "Table 2"
    assert (section.kind, section.number, section.lines) == ("section", "4.3", (39, 39))
    assert text[slice(*section.span)] == "Section 4.3, Line 39"
    line = parse_refs("Lines 39-41")[0]
    assert (line.kind, line.number, line.lines) == ("line", None, (39, 41))


def test_not_references():
    assert labels("Table 3, 85.2% accuracy") == ["Table 3"]
    assert labels("In section 4, we ablate") == ["Section 4"]
    assert labels("all 3 tables and the appendix") == []
    assert labels("Eq. 3 holds") == []


def test_lettered_numbers_mark_appendix_material():
    assert [r.lettered for r in parse_refs("Table A.2, Table 2, Section B.1")] == [True, False, True]


def test_figure_table_filter_and_unique():
    text = "Figure 2 and Section 3 and Table 1; again Figure 2."
    assert [r.label for r in figure_table_refs(text)] == ["Figure 2", "Table 1", "Figure 2"]
    assert [r.label for r in unique_refs(parse_refs(text))] == ["Figure 2", "Section 3", "Table 1"]


def test_docstring_example():
    assert doctest.testmod(refs).failed == 0


@given(
    kind=st.sampled_from(["Figure", "Table", "Section"]),
    number=st.from_regex(r"[1-9][0-9]?(\.[1-9])?", fullmatch=True),
    line=st.one_of(st.none(), st.integers(1, 999)),
    prefix=st.text(alphabet="abc ,.", max_size=8),
)
def test_labels_round_trip(kind, number, line, prefix):
    text = f"{kind} {number}" + (f", Line {line}" if line and kind == "Section" else "")
    found = parse_refs(prefix + " " + text + " end")
    assert len(found) == 1
    assert parse_refs(found[0].label)[0].key == found[0].key
