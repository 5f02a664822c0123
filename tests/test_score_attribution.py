"""score_attribution through its CLI: §4.2's metrics of hand-written citations against
hand-written gold references, per sentence and in the report's table; Table 3's BERTScore-F1 with a
tiny randomly initialised BERT the test builds offline (the number means nothing, the wiring and
the greedy matching are real), and n/a with its reason when no model folder is given."""
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from attribution_fixtures import generation, make_items, write_generations
from conftest import run_stage
from stages.core.tables import table_schema


def _rows(gen, kind, sources):
    rows = []
    for j, (sentence, cited) in enumerate(zip(gen["summary_sentences"], sources)):
        row = {"id": f"{kind}:{gen['id']}:{j}", "generation_id": gen["id"], "item_id": gen["item_id"], "mode": gen["mode"],
               "sentence_index": j, "sentence": sentence, "sources": cited}
        rows.append(row | ({"method": "attention", "image_score": None} if kind == "cite" else {"origin": "file", "judge": None}))
    return rows


def _score(tmp_path, *params):
    items = make_items(tmp_path)
    gen = generation()
    gens = write_generations(tmp_path / "gens.parquet", [gen])
    cites, refs = tmp_path / "cites.parquet", tmp_path / "refs.parquet"
    same = [["0", "1"], ["2", "IMG"]]
    pq.write_table(pa.Table.from_pylist(_rows(gen, "cite", same), schema=table_schema("attr_citations")), cites)
    pq.write_table(pa.Table.from_pylist(_rows(gen, "ref", same), schema=table_schema("attr_references")), refs)
    out = {k: tmp_path / f"{k}.parquet" for k in ("scores", "summary")}
    run_stage("score_attribution", "--input", f"citations={cites}", "--input", f"references={refs}", "--input", f"generations={gens}",
              "--input", f"source_items={items}", "--output", f"scores={out['scores']}", "--output", f"summary={out['summary']}",
              "--output", f"report={tmp_path / 'report.md'}", *params)
    return gen, pq.read_table(out["scores"]).to_pylist()[0], (tmp_path / "report.md").read_text()


def test_scores_and_report(tmp_path):
    _, score, report = _score(tmp_path, "--param", "bertscore_model=")  # KEY= is the empty string
    assert (score["text_f1"], score["text_em"], score["image_acc"], score["joint_em"]) == (100.0, 100.0, 100.0, 100.0)
    assert score["silver"] == 0 and 0 < score["rouge1"] < 1
    # beside each number its coverage: 2 of 2 sentences with a reference, ROUGE over the 1 generation with a reference summary
    assert ("| m | img_raw | attention | 2 | 0 | 100.00 (2/2) | 100.00 (2/2) | 100.00 (2/2) | 100.00 (2/2) | "
            f"{score['rouge1']:.3f} (1/1) |") in report
    # BERTScore turned off: n/a over none of the 1 generation, with the reason
    assert score["bertscore_f1"] is None and report.rstrip().endswith("| n/a (0/1) |")
    assert "BERTScore: n/a: no local model folder given (score_attribution.bertscore_model)." in report


def tiny_bert(folder, texts):
    """A 2-layer BERT with random weights (seed 0) and a word-level vocabulary of `texts`, saved as
    a local model folder; nothing is downloaded."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir()
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    BertTokenizer(str(folder / "vocab.txt"), model_max_length=64).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=5 + len(words), hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=64)
    BertModel(config).save_pretrained(folder)
    return folder


def test_bertscore_with_a_local_model_folder(tmp_path):
    """BERTScore (Zhang et al., the bert-score package's rule): per token the cosine similarity of
    layer-L hidden states; precision = mean over the candidate's word pieces (not [CLS]/[SEP]) of
    the best match among ALL reference tokens ([CLS] and [SEP] included), recall the same the other
    way, F1 their harmonic mean. Computed here from the model's hidden states by hand."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    summary = generation()["summary"]
    reference = "The swollen knee hurts when walking."  # item a's reference summary (attribution_fixtures.LINES)
    model = tiny_bert(tmp_path / "bert", [summary, reference])
    _, score, report = _score(tmp_path, "--params", f'{{"bertscore_model": "{model}", "bertscore_layers": 2}}')

    tokenizer, bert = AutoTokenizer.from_pretrained(model), AutoModel.from_pretrained(model).eval()

    def states(text):
        with torch.no_grad():
            h = bert(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]  # layer 2 of 2
        return h / h.norm(dim=-1, keepdim=True)

    sim = states(summary) @ states(reference).T  # rows: candidate tokens, columns: reference tokens
    precision = sim[1:-1].max(dim=1).values.mean().item()
    recall = sim[:, 1:-1].max(dim=0).values.mean().item()
    f1 = 2 * precision * recall / (precision + recall)
    assert score["bertscore_f1"] == pytest.approx(f1, abs=1e-5)
    assert f"| {f1:.3f} (1/1) |" in report and "BERTScore: bert-score with bert, layer 2." in report


def test_bertscore_folder_must_exist(tmp_path):
    with pytest.raises(AssertionError, match="not a local model folder"):
        _score(tmp_path, "--param", f"bertscore_model={tmp_path / 'nowhere'}")
    # the default is the seed's metric with bert-score's English model, read from models/roberta-large
    with pytest.raises(AssertionError, match=r"bertscore_model models/roberta-large: not a local model folder .*roberta-large's files"):
        _score(tmp_path)
