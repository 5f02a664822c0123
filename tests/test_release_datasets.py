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
from tests.test_release_mavis import _build as build_mavis, _shards
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


def _check_loads(folder: Path, cache: Path, seed_title: str) -> list[str]:
    import datasets

    meta = _front_matter(folder)
    tables = sorted(p.stem for p in (folder / "parquet").glob("*.parquet") if pq.read_metadata(p).num_rows)
    assert sorted(c["config_name"] for c in meta["configs"]) == tables
    assert meta["license"] and seed_title in (folder / "README.md").read_text()
    for name in tables:
        written = pq.read_table(folder / "parquet" / f"{name}.parquet")
        loaded = datasets.load_dataset(str(folder), name, split="test", cache_dir=str(cache))
        assert loaded.num_rows == written.num_rows, name
        assert loaded.data.table.schema.remove_metadata() == written.schema.remove_metadata(), name
        assert loaded.data.table.to_pylist() == written.to_pylist(), name
    default = datasets.load_dataset(str(folder), split="test", cache_dir=str(cache))  # the first table
    assert default.num_rows == pq.read_metadata(folder / "parquet" / f"{meta['configs'][0]['config_name']}.parquet").num_rows
    return tables


def test_every_family_release_loads_with_datasets(tmp_path):
    (tmp_path / "mavis").mkdir()
    (tmp_path / "mc").mkdir()
    mavis = Path(build_mavis(tmp_path / "mavis", _shards(), [])["path"])  # no facts: an empty table
    store, el, _ = build_mcitebench(tmp_path / "mc")
    mcitebench = Path(release_mcitebench(tmp_path / "mc", store, el)[0]["path"])
    m2rag = _m2rag(tmp_path)
    assert "Empty in this release, so not a config: facts, documents, fact_documents, images, reject_counts." in (mavis / "README.md").read_text()
    assert "instances" in _check_loads(mavis, tmp_path / "cache", "MAVIS: A Benchmark for Multimodal Source Attribution")
    assert "questions" in _check_loads(mcitebench, tmp_path / "cache", "MCiteBench: A Multimodal Benchmark")
    assert "queries" in _check_loads(m2rag, tmp_path / "cache", "Multi-modal Retrieval Augmented Multi-modal Generation")
