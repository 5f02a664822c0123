"""attribute_attention through its CLI: Algorithm 1 (cite-while-you-generate.txt §3.2-3.3) on a
stored generation whose pooled attention gives the answer by construction."""
import pyarrow.parquet as pq

from attribution_fixtures import generation, write_generations
from conftest import run_stage


def test_algorithm_1_on_a_stored_generation(tmp_path):
    gens = write_generations(tmp_path / "gens.parquet", [generation()])
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_attention", "--input", f"generations={gens}", "--output", f"citations={cites}", "--param", "k=1", "--param", "tau=0.5")
    rows = pq.read_table(cites).to_pylist()
    predicted = [r["sources"] for r in rows if r["method"] == "attention"]
    # k=1: tokens vote 0, 1 | 2, 2; τ 0.5 of 2 tokens = 1 vote; image share 0 / 0.1 vs 0.6 / 0.4 -> sentence 1
    assert predicted == [["0", "1"], ["2", "IMG"]]
    # with k=1 the majority over the top token is the max rule: the same citations
    assert [r["sources"] for r in rows if r["method"] == "attention_max"] == predicted


def test_max_aggregation_beside_majority(tmp_path):
    """§5.2.1 / Table 4: "max" sends each generated token to the sentence of its single most attended
    source token; majority (the method) to the majority sentence of its top k. Source tokens: two of
    sentence 0, two of sentence 1, one of sentence 2; k=3, τ=0.5 (a 2-token sentence needs 1 vote).
      t0 [.1 .1 .05 .05 .5]: top 3 = s2, s0, s0 -> majority 0; max 2
      t1 [.3 .2 .25 .05 0]:  top 3 = s0, s1, s0 -> majority 0; max 0
      t2 [.05 0 .3 .3 .35]:  top 3 = s2, s1, s1 -> majority 1; max 2
      t3 [0 0 .2 .25 .3]:    top 3 = s2, s1, s1 -> majority 1; max 2
    summary sentence 0 = t0, t1; sentence 1 = t2, t3."""
    gen = generation(mode="text") | {
        "id": "gen:a:text", "has_image": False, "token_sentence": [0, 0, 1, 1], "source_labels": [0, 0, 1, 1, 2],
        "pooled": [[0.1, 0.1, 0.05, 0.05, 0.5], [0.3, 0.2, 0.25, 0.05, 0.0], [0.05, 0.0, 0.3, 0.3, 0.35], [0.0, 0.0, 0.2, 0.25, 0.3]]}
    gens = write_generations(tmp_path / "gens.parquet", [gen])
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_attention", "--input", f"generations={gens}", "--output", f"citations={cites}", "--param", "k=3", "--param", "tau=0.5")
    by_method = {}
    for r in pq.read_table(cites).to_pylist():
        by_method.setdefault(r["method"], []).append(r["sources"])
    assert by_method == {"attention": [["0"], ["1"]], "attention_max": [["0", "2"], ["2"]]}


def test_attention_rows_that_miss_the_source_tokens_reject_the_generation(tmp_path):
    """Each generated token's pooled row covers every source token: rows of no length under a
    labelled source (a capture that stored nothing) are bad_capture, not a crash in the vote, and
    the other generation is attributed."""
    empty = generation() | {"id": "gen:a:empty", "pooled": [[] for _ in generation()["token_sentence"]]}
    gens = write_generations(tmp_path / "gens.parquet", [generation(), empty])
    cites = tmp_path / "cites.parquet"
    run_stage("attribute_attention", "--input", f"generations={gens}", "--output", f"citations={cites}", "--param", "k=1", "--param", "tau=0.5")
    assert {r["generation_id"] for r in pq.read_table(cites).to_pylist()} == {generation()["id"]}
    [reject] = pq.read_table(f"{cites}.rejects.parquet").to_pylist()
    assert (reject["id"], reject["reason"]) == ("gen:a:empty", "bad_capture") and "x 5 source tokens" in reject["detail"]
