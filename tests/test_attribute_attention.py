"""attribute_attention through its CLI: Algorithm 1 (cite-while-you-generate.txt §3.2-3.3) on a
stored generation whose pooled attention gives the answer by construction."""
import pyarrow.parquet as pq

from attribution_fixtures import generation, write_generations
from conftest import run_stage


def test_algorithm_1_on_a_stored_generation(tmp_path):
    gens = write_generations(tmp_path / "gens.parquet", [generation()])
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_attention", "--input", f"generations={gens}", "--output", f"citations={cites}", "--param", "k=1", "--param", "tau=0.5")
    predicted = [r["sources"] for r in pq.read_table(cites).to_pylist()]
    # k=1: tokens vote 0, 1 | 2, 2; τ 0.5 of 2 tokens = 1 vote; image share 0 / 0.1 vs 0.6 / 0.4 -> sentence 1
    assert predicted == [["0", "1"], ["2", "IMG"]]
