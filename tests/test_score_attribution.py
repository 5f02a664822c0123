"""score_attribution through its CLI: §4.2's metrics of hand-written citations against
hand-written gold references, per sentence and in the report's table."""
import pyarrow as pa
import pyarrow.parquet as pq

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


def test_scores_and_report(tmp_path):
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
              "--output", f"report={tmp_path / 'report.md'}")
    score = pq.read_table(out["scores"]).to_pylist()[0]
    assert (score["text_f1"], score["text_em"], score["image_acc"], score["joint_em"]) == (100.0, 100.0, 100.0, 100.0)
    assert score["silver"] == 0 and 0 < score["rouge1"] < 1
    # beside each number its coverage: 2 of 2 sentences with a reference, ROUGE over the 1 generation with a reference summary
    assert ("| m | img_raw | attention | 2 | 0 | 100.00 (2/2) | 100.00 (2/2) | 100.00 (2/2) | 100.00 (2/2) | "
            f"{score['rouge1']:.2f} (1/1) |") in (tmp_path / "report.md").read_text()
