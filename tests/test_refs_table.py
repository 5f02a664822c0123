"""Table-driven test of the reference grammar (stages/core/refs.py) on answer-like strings: each
answer is split into sentences as the evaluation splits responses (split_citations.split_sentences)
and every sentence's references (`citation_refs`, labels in text order) must be exactly the
expected ones. The first block holds the forms that used to be misread (issue 15); the rest are
forms that must keep working."""
import pytest

from stages.core.refs import citation_refs
from stages.eval_mcitebench.split_citations import citations_in, split_sentences

F, T, S = "Figure", "Table", "Section"

CASES = [
    # a comma after a reference followed by a count or a measurement is not a further reference
    ("In Figure 1, 3 of the 5 runs diverge.", [["Figure 1"]]),
    ("Table 2, 4.1 points higher than the baseline.", [["Table 2"]]),
    ("As Figure 2 shows, 10 seeds suffice.", [["Figure 2"]]),
    ("In Table 3, 85.2% of the answers are correct.", [["Table 3"]]),
    ("From Table 4, 2 of our 3 models win. Figure 5, 12 epochs later, agrees.", [["Table 4"], ["Figure 5"]]),
    ("In Fig. 6, 7 curves overlap.", [["Figure 6"]]),
    ("Section 3, 2 paragraphs earlier, defines it.", [["Section 3"]]),
    ("See Table 2, 3.5x faster in wall time.", [["Table 2"]]),
    # a bracket mixing a number and a figure name keeps both
    ("The gain is large [1, Figure 2].", [["[1]", "Figure 2"]]),
    ("It holds across datasets [Table 3; 2].", [["Table 3", "[2]"]]),
    ("Both agree [2, Fig. 4, 5].", [["[2]", "Figure 4", "[5]"]]),
    # "and" inside brackets
    ("This is supported [1 and 2].", [["[1]", "[2]"]]),
    ("This is supported [1, 2 and 3].", [["[1]", "[2]", "[3]"]]),
    ("See [Figure 1 and 3].", [["Figure 1", "Figure 3"]]),
    ("See [1 and Table 2].", [["[1]", "Table 2"]]),
    # ranges written with "to"
    ("Figures 2 to 4 show the trend.", [[f"{F} 2", f"{F} 3", f"{F} 4"]]),
    ("Tables 1 to 3 list them.", [[f"{T} 1", f"{T} 2", f"{T} 3"]]),
    ("We use passages [1 to 3].", [["[1]", "[2]", "[3]"]]),
    ("Sections 3 to 5 describe it.", [[f"{S} 3", f"{S} 4", f"{S} 5"]]),
    # "Tab 2" without a period
    ("Tab 2 reports the ablation.", [["Table 2"]]),
    ("as in tab 3 and Tab 4.", [["Table 3", "Table 4"]]),
    # bold and other emphasis inside brackets
    ("The loss drops [**1**].", [["[1]"]]),
    ("The loss drops [**1**, **2**].", [["[1]", "[2]"]]),
    ("The loss drops [**Figure 2**].", [["Figure 2"]]),
    ("The loss drops [*Table 1*].", [["Table 1"]]),
    ("The loss drops **[3]**.", [["[3]"]]),
    # abbreviations do not split sentences and are not references
    ("As shown in Fig. 3, the loss drops. See Sec. 4.2 for details.", [["Figure 3"], ["Section 4.2"]]),
    ("Smith et al. report the same in Table 2. Ours is better.", [["Table 2"], []]),
    ("Other methods, e.g. LoRA, fail (Fig. 2).", [["Figure 2"]]),
    ("Baselines, i.e. BM25 and DPR, are in Tab. 5.", [["Table 5"]]),
    ("We follow Liu et al. (2023) [4].", [["[4]"]]),
    ("Eq. 3 holds, cf. Figs. 2 and 3.", [["Figure 2", "Figure 3"]]),
    ("Results (cf. Tab. 2) hold. Next we test.", [["Table 2"], []]),
    # sub-figures fold into their figure
    ("Figure 3a shows it.", [["Figure 3"]]),
    ("Fig. 3(b) shows it.", [["Figure 3"]]),
    ("Figure 3 (a-c) shows it.", [["Figure 3"]]),
    ("Figures 3a and 4b differ.", [["Figure 3", "Figure 4"]]),
    # Figure 10 is not Figure 1
    ("Figure 10 and Figure 1 differ.", [["Figure 10", "Figure 1"]]),
    ("Table 12 extends Table 1.", [["Table 12", "Table 1"]]),
    ("See [10] and [1].", [["[10]", "[1]"]]),
    # years in brackets and bibliography-style brackets
    ("A year [2024] is a bracketed index.", [["[2024]"]]),
    ("As argued before [Smith et al., 2020], it fails.", [[]]),
    ("As argued before [see above], it fails.", [[]]),
    # lists, slashes, dashes
    ("Table 2/3/4/5 compare them.", [[f"{T} 2", f"{T} 3", f"{T} 4", f"{T} 5"]]),
    ("Tables 2, 3 and 4.", [[f"{T} 2", f"{T} 3", f"{T} 4"]]),
    ("Figures 2-4 plot it.", [[f"{F} 2", f"{F} 3", f"{F} 4"]]),
    ("Figures 2\u20134 plot it.", [[f"{F} 2", f"{F} 3", f"{F} 4"]]),
    ("Figures 2 and 3 show the gap.", [[f"{F} 2", f"{F} 3"]]),
    ("Figure 2 and 3 show the gap.", [[f"{F} 2", f"{F} 3"]]),
    ("Figures 2, 3 show the gap.", [[f"{F} 2", f"{F} 3"]]),
    ("As in Table 2, 3.", [[f"{T} 2", f"{T} 3"]]),
    ("Figure 2 and Figure 3 show the gap.", [[f"{F} 2", f"{F} 3"]]),
    ("Figure 2, Figure 3.", [[f"{F} 2", f"{F} 3"]]),
    ("It holds [1][2].", [["[1]", "[2]"]]),
    ("It holds [1; 3].", [["[1]", "[3]"]]),
    ("It holds [2-4].", [["[2]", "[3]", "[4]"]]),
    # sections, lines, appendix
    ("Section 4.3, Line 39 states it.", [["Section 4.3, Line 39"]]),
    ("Section 4.3 (Lines 39-41) states it.", [["Section 4.3, Lines 39-41"]]),
    ("In section 4, we ablate it.", [["Section 4"]]),
    ("\u00a74.2 covers it.", [["Section 4.2"]]),
    ("Table A.2 in Appendix B has it.", [["Table A.2", "Appendix B"]]),
    ("Table 4.2 illustrates it.", [["Table 4.2"]]),
    # several sentences, citation-only sentences attach to the one before
    ("It rises [1]. It falls [2].", [["[1]"], ["[2]"]]),
    ("Claim one.\n[1]\nClaim two (Table 2).", [["[1]"], ["Table 2"]]),
    ("No citation here. None at all.", [[], []]),
    ("Accuracy is 85.2% on 3 tasks. Figure 4 agrees.", [[], ["Figure 4"]]),
    ("We ran 3 seeds and 5 tables of runs.", [[]]),
    ("Eq. 3 holds.", [[]]),
]


@pytest.mark.parametrize("answer, expected", CASES, ids=[c[0][:40] for c in CASES])
def test_references_per_sentence(answer, expected):
    sentences = split_sentences(answer)
    assert [[r.label for r in citation_refs(s)] for s in sentences] == expected


def test_table_size():
    assert len(CASES) >= 60


@pytest.mark.parametrize("answer, expected", CASES, ids=[c[0][:40] for c in CASES])
def test_evaluation_citations_agree(answer, expected):
    """split_citations reads the same references: figures, tables and bracket items, each once."""
    keep = [[label for label in dict.fromkeys(s) if label.startswith(("[", "Figure", "Table"))] for s in expected]
    assert [citations_in(s) for s in split_sentences(answer)] == keep
