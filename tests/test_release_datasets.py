"""Every family's release folder loads with `datasets.load_dataset(<folder>, <table>)` offline: the
card's YAML front matter names one config per table with the Parquet file's features, so each
table comes back with the rows and the Arrow types the release wrote."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import run_stage
from stages.core.tables import write_table
from tests.test_release_m2rag import CATEGORIES, row
from tests.test_release_mavis import _build as build_mavis, _fact, _shards
from tests.test_release_mcitebench import build as build_mcitebench, release as release_mcitebench


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # nothing read from or left in the user's cache


def _m2rag(tmp_path: Path) -> Path:
    queries = tmp_path / "c.00000.parquet"
    write_table(queries, [row(1, [1, 2]), row(2, [2]), row(3, [11], clear=0, needs_images=0)], "m2rag_classified_queries")
    manifest = tmp_path / "m2rag.json"
    run_stage("release_m2rag", "--input", f"queries={queries}", "--output", f"manifest={manifest}",
              "--params", json.dumps({"name": "m2rag-test", "releases_dir": str(tmp_path / "rel"), "categories": CATEGORIES}))
    return Path(json.loads(manifest.read_text())["path"])


def _front_matter(folder: Path) -> dict:
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def _check_loads(folder: Path, cache: Path, seed_title: str, unsplit: str = "test") -> list[str]:
    import datasets

    meta = _front_matter(folder)
    tables = sorted(p.stem for p in (folder / "parquet").glob("*.parquet") if pq.read_metadata(p).num_rows)
    assert sorted(c["config_name"] for c in meta["configs"]) == tables
    assert meta["license"] and seed_title in (folder / "README.md").read_text()
    for name in tables:
        written = pq.read_table(folder / "parquet" / f"{name}.parquet")
        if "split" in written.column_names:  # a table that holds splits loads as them (test_mavis_card_names_the_splits_it_holds)
            continue
        loaded = datasets.load_dataset(str(folder), name, split=unsplit, cache_dir=str(cache))
        assert loaded.num_rows == written.num_rows, name
        assert loaded.data.table.schema.remove_metadata() == written.schema.remove_metadata(), name
        assert loaded.data.table.to_pylist() == written.to_pylist(), name
    return tables


def test_every_family_release_loads_with_datasets(tmp_path):
    (tmp_path / "mavis").mkdir()
    (tmp_path / "mc").mkdir()
    mavis = Path(build_mavis(tmp_path / "mavis", _shards(), [])["path"])  # no facts: an empty table; no annotation: all train
    store, el, _ = build_mcitebench(tmp_path / "mc")
    mcitebench = Path(release_mcitebench(tmp_path / "mc", store, el)[0]["path"])
    m2rag = _m2rag(tmp_path)
    assert "Empty in this release, so not a config: facts, documents, fact_documents, images, reject_counts." in (mavis / "README.md").read_text()
    assert "instances" in _check_loads(mavis, tmp_path / "cache", "MAVIS: A Benchmark for Multimodal Source Attribution", "full")
    assert "questions" in _check_loads(mcitebench, tmp_path / "cache", "MCiteBench: A Multimodal Benchmark")
    assert "queries" in _check_loads(m2rag, tmp_path / "cache", "Multi-modal Retrieval Augmented Multi-modal Generation")
    for folder, first in ((mcitebench, "questions"), (m2rag, "queries")):  # every row is evaluation data: one split, test
        default = datasets_load(folder, None, "test", tmp_path / "cache")  # the default config is the first table
        assert default.num_rows == pq.read_metadata(folder / "parquet" / f"{first}.parquet").num_rows


def datasets_load(folder: Path, config: str | None, split: str, cache: Path):
    import datasets

    return datasets.load_dataset(str(folder), config, split=split, cache_dir=str(cache))


def test_mavis_card_names_the_splits_it_holds(tmp_path):
    """MAVIS §3.2 Step 3: the annotated instances are the test split, the rest train; the card's
    configs load exactly those rows per split (instances and facts), and the tables both splits
    share load as the one split `full` (issue 33 item 4)."""
    import datasets

    facts = [_fact("reddit:1/c1", 0), _fact("reddit:1/c1", 1), _fact("reddit:1/c2", 0), _fact("reddit:3/c4", 0)]
    sheet = tmp_path / "annotation_sheet.csv"  # the filled sheet: reddit:1/c1's facts decided, reddit:1/c2's not yet
    sheet.write_text("instance_id,fact_id,relevant,note\n"
                     "reddit:1/c1,reddit:1/c1#0.0,yes,\nreddit:1/c1,reddit:1/c1#0.1,yes,\nreddit:1/c2,reddit:1/c2#0.0,,\n")
    folder = Path(build_mavis(tmp_path, _shards(), [], facts, annotations=sheet)["path"])
    by_split = lambda config, split: sorted(r["id" if config == "instances" else "fact_id"]  # noqa: E731
                                            for r in datasets_load(folder, config, split, tmp_path / "cache"))
    assert by_split("instances", "test") == ["reddit:1/c1"]
    assert by_split("instances", "train") == ["reddit:1/c2", "reddit:2/c3", "reddit:3/c4"]
    assert by_split("facts", "test") == ["reddit:1/c1#0.0", "reddit:1/c1#0.1"]
    assert by_split("facts", "train") == ["reddit:1/c2#0.0", "reddit:3/c4#0.0"]
    assert datasets_load(folder, "questions", "full", tmp_path / "cache").num_rows == 3
    with pytest.raises(ValueError, match="Unknown split"):
        datasets_load(folder, "questions", "test", tmp_path / "cache")
    assert datasets_load(folder, None, "test", tmp_path / "cache").num_rows == 1  # the default config is instances
    card = (folder / "README.md").read_text()
    assert "`instances` (test: 1, train: 3)" in card and "`facts` (test: 2, train: 2)" in card and "`questions` (full: 3)" in card
    # without an annotated instance there is no test split at all, and the card says so by listing train only
    (tmp_path / "plain").mkdir()
    plain = Path(build_mavis(tmp_path / "plain", _shards(), [])["path"])
    assert "`instances` (train: 4)" in (plain / "README.md").read_text()
    with pytest.raises(ValueError):
        datasets.load_dataset(str(plain), "instances", split="test", cache_dir=str(tmp_path / "cache"))
