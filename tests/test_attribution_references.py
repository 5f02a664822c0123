"""attribution_references through its CLI: the input file's reference citations, matched to the
generation's summary sentences by text, become gold references (origin file)."""
import pyarrow.parquet as pq

from attribution_fixtures import generation, make_items, write_generations
from conftest import run_stage


def test_file_references(tmp_path):
    items = make_items(tmp_path)
    gens = write_generations(tmp_path / "gens.parquet", [generation()])
    refs = tmp_path / "refs.parquet"
    run_stage("attribution_references", "--input", f"generations={gens}", "--input", f"source_items={items}",
              "--output", f"references={refs}")
    ref_rows = pq.read_table(refs).to_pylist()
    assert [(r["sources"], r["origin"]) for r in ref_rows] == [(["0", "1"], "file"), (["2", "IMG"], "file")]
