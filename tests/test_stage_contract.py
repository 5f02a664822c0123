"""Every stage under generated input (issue 32): the input tables are drawn from each stage's
declared input schemas and contracts (schemas/tables/*.yaml) and spoiled the ways real data is -
nulls (in columns and in struct fields), values off their declared set or range, NaN, repeated keys, empty, 20 kB and odd-Unicode
strings, castable wrong types (int64 for int32, large strings), shards - and the stage runs
through its real CLI, as Snakemake runs it. Whatever it is given, the stage must either

- exit 0 with its outputs and sidecars consistent: the rejects sidecar holds `rejected` rows, each
  output the rows the report counts, no table with a declared key repeats one, the count invariant
  holds (rows in = rows out + rejected, for the stages without a fan-out invariant of their own),
  and every input row with a null in a column (or struct field) its table declares not null was
  rejected on read; or
- exit non-zero with one line naming the input (`<stage>: error: ...` naming an input, its file,
  or a store the stage reads, such as the image store), no traceback, and nothing left in its
  output folder.

Model stages talk to tests/schema_llm.py: a real OpenAI-compatible server on 127.0.0.1 that gives
every call the plainest answer its JSON schema allows. So this test checks the stages' handling of
their rows, not any model's answers (the model layer has its own tests). Fetching stages run in
fetch mode replay on a bundled WARC, where an unknown url is a `not_in_archive` reject.

A few examples per stage keep the whole run to a few minutes on two cores (CITEFORGE_CONTRACT_EXAMPLES
raises it for a deeper local run; CI draws the same examples every run, and CITEFORGE_CONTRACT_SEED=<n>
draws others: `CITEFORGE_CONTRACT_EXAMPLES=8 CITEFORGE_CONTRACT_SEED=4242 pytest tests/test_stage_contract.py`
is how release_mcitebench's and score_mcitebench's crafted-row crashes were found); `-m "not contract"`
leaves it out. The stages whose inputs are
files rather than tables (dumps, JSONL, releases, WARCs) are listed in FILE_INPUTS with the tests
that feed them bad files. A stage needs an entry in CASES only for params beyond its model (`llm`,
on the plain server) and a required name; a new model stage needs none."""
from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from schema_llm import plain_llm_server
from stages.core.layout import stage_module
from stages.core.stage import REQUIRED
from stages.core.tables import CONTRACT_REJECTS, table_contract, table_schema

pytestmark = pytest.mark.contract

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("CITEFORGE_CONTRACT_EXAMPLES", "2"))
SEED = os.environ.get("CITEFORGE_CONTRACT_SEED")  # other examples than CI's fixed ones (a deeper local hunt)
ID_POOL = ["k1", "k2", "k3", "reddit:p1/c1"]  # keys and references share a pool, so joins meet and keys repeat
SHA_POOL = [hashlib.sha256(key.encode()).hexdigest() for key in ID_POOL[:2]] + [""]  # what a sha256 column's pattern takes, shared likewise
WORDS = ["Why is the sky blue?", "Blue light scatters most [1].", "Figure 2", "text", "image", "0.5", "https://example.test/a.png"]
ODD = ["", "\u05dc\u05de\u05d4 \u202eWhy\u202c\u200b the\u200d sky \U0001f30c \U0001f469\u200d\U0001f52c?", "\x00\x01 control", "e\u0301\ufeff",
       "Why " + "so long " * 2500]  # the last: 20 kB
CASTS = {pa.int32(): pa.int64(), pa.string(): pa.large_string(), pa.float64(): pa.float32(), pa.int64(): pa.int32()}
CATEGORIES = [{"id": i, "name": f"topic {i}", "description": f"queries about topic {i}"} for i in range(1, 12)]

# Stages with no table input: what they read is a file format of its own, fed bad files elsewhere.
FILE_INPUTS = {
    "attribution_inputs": "a JSONL file (tests/test_attribution_inputs.py)",
    "build_catalog": "any stage output files (tests/test_build_catalog.py)",
    "build_text_index": "corpus files (tests/test_build_text_index.py)",
    "estimate_cost": "any stage output files and a profile YAML (tests/test_estimate_cost.py)",
    "citeeval_fit": "a ratings CSV/JSONL (tests/test_citeeval_fit.py)",
    "generate_answers": "an MCiteBench release (tests/bad_inputs/test_records.py)",
    "harvest_hub_dataset": "dataset files (tests/bad_inputs/test_records.py)",
    "harvest_openreview": "an OpenReview API or its WARC (tests/test_harvest_openreview.py)",
    "harvest_pushshift": "pushshift dumps (tests/bad_inputs/test_pushshift.py)",
    "harvest_reddit_live": "the Reddit API or its WARC (tests/test_harvest_reddit_live.py)",
    "m2rag_generate": "an M2RAG release (tests/test_m2rag_generate.py)",
    "mavis_generate_queries": "a MAVIS release (tests/test_mavis_generate_queries.py)",
    "report_funnel": "report sidecars (tests/test_report_funnel.py)",
    "search_web": "a queries file and a web search provider (tests/test_search_web.py, tests/bad_inputs/test_contract.py)",
    "retrieve_text": "a queries file and an index folder (tests/test_retrieve_text.py, tests/bad_inputs/test_contract.py)",
}


@dataclass
class Env:
    tmp: Path
    llm_url: str
    release: Path  # a MAVIS fixture release
    tiny_vlm: Path
    judge_labels: Path  # a labelled sheet for mavis_validate_judge, naming judgements by the id pool

    def llm(self) -> dict:
        return {"backend": "openai", "model": "plain", "max_attempts": 1, "cache": {"mode": "off"},
                "image_store": str(self.tmp / "images"), "openai": {"base_url": self.llm_url, "max_in_flight": 2, "max_retries": 1}}


@dataclass
class Case:
    params: object = lambda env: {}  # Env -> params
    tables: dict = field(default_factory=dict)  # input -> the table its rows are drawn from, for inputs that name none
    files: object = lambda env: {}  # Env -> {input: path} for its file inputs


REPLAY = {"fetch": {"mode": "replay"}}
CASES = {
    "attribute_embedding": Case(lambda env: {"device": "cpu", "clip_random": True, "clip_model": "ViT-S-32"}),
    "attribution_references": Case(lambda env: {"judge": "plain", "llm": env.llm()}),
    "cache_images": Case(lambda env: {**REPLAY, "store": str(env.tmp / "images"), "owner_column": "id", "url_column": "image_urls"},
                         tables={"owners": "reddit_questions"}, files=lambda env: {"warcs": REPO / "data/samples/reddit/images.warc.gz"}),
    "classify_queries": Case(lambda env: {"llm": env.llm(), "categories": CATEGORIES}),
    "fetch_pages": Case(lambda env: {**REPLAY, "store": str(env.tmp / "pages")},
                        files=lambda env: {"warcs": REPO / "data/samples/retrieval/web.warc.gz"}),
    "filter_images": Case(lambda env: {"clip_model": "", "store": str(env.tmp / "images"), "score_cache": "", "text_key": "owner_id"},
                          tables={"texts": "reddit_questions"}),
    "filter_questions": Case(lambda env: {"question_words": ["why", "how"]}),
    "filter_visual_dependency": Case(lambda env: {"answerers": [{"name": "blind", "llm": env.llm()}], "judge": env.llm()}),
    "generate_attributed": Case(lambda env: {"model": str(env.tiny_vlm), "model_name": "tiny", "max_new_tokens": 4, "device": "cpu",
                                             "modes": ["text"]}),
    "mavis_generate_answers": Case(lambda env: {"model": "plain", "llm": env.llm(), "methods": ["vanilla"]},
                                   files=lambda env: {"release": env.release}),
    "mavis_judge": Case(lambda env: {"judge": "plain", "llm": env.llm()}, files=lambda env: {"release": env.release}),
    "mavis_retrieval_quality": Case(lambda env: {"retrievers": ["minilm"], "ndcg_k": 3, "recall_k": 4, "device": "cpu"},
                                    files=lambda env: {"release": env.release}),
    "mavis_retrieve": Case(lambda env: {"settings": ["text"], "top_k": 2, "device": "cpu"}, files=lambda env: {"release": env.release}),
    "score_attribution": Case(lambda env: {"bertscore_model": ""}),
    "mavis_score": Case(lambda env: {"mauve_featurizer": "sentence-encoder", "mauve_device": "cpu"}),
    "mavis_validate_judge": Case(files=lambda env: {"release": env.release, "labels": env.judge_labels}),
    "mcitebench_attention": Case(lambda env: {"model": str(env.tiny_vlm), "model_name": "tiny", "max_new_tokens": 3, "device": "cpu",
                                              "dtype": "float32"}),
    "parse_pdfs": Case(lambda env: {"pdf_store": str(env.tmp / "pdfs"), "image_store": str(env.tmp / "images"),
                                    "server_url": "http://127.0.0.1:9"}),
    "phash_dedup": Case(lambda env: {"store": str(env.tmp / "images")}),
    "probe_source_identification": Case(lambda env: {"model": "plain", "llm": env.llm()}),
    "release_m2rag": Case(lambda env: {"name": "t", "releases_dir": str(env.tmp / "releases"), "categories": CATEGORIES,
                                       "image_store": str(env.tmp / "images")}),
    "release_mavis": Case(lambda env: {"name": "t", "releases_dir": str(env.tmp / "releases"), "image_store": str(env.tmp / "images")}),
    "release_mcitebench": Case(lambda env: {"releases_dir": str(env.tmp / "releases"), "image_store": str(env.tmp / "images")}),
    "retrieve_fact_documents": Case(lambda env: {**REPLAY, "cache_mode": "off", "provider": "searxng",
                                                 "provider_settings": {"endpoint": "http://searx.test"}},
                                    files=lambda env: {"warcs": REPO / "data/samples/retrieval/mavis_facts.warc.gz"}),
    "score_elements": Case(lambda env: {"llm": env.llm(), "kinds": ["text", "image"]}),
}


def all_stages() -> list[str]:
    from stages.core.declarations import stage_files  # stage modules, not a family's helper modules

    return sorted(p.stem for p in stage_files())


def case_of(stage) -> Case:
    """The stage's case: CASES where it needs more, else its model (llm) on the plain server and a
    required name (`judge`, `model`) given as "plain": a new model stage needs no entry here."""
    if stage.name in CASES:
        return CASES[stage.name]
    names = {n: "plain" for n, p in stage.params.items() if p.default is REQUIRED and p.type is str}
    return Case(lambda env: {**({"llm": env.llm()} if "llm" in stage.params else {}), **names})


GENERATED = [name for name in all_stages() if name not in FILE_INPUTS]


def test_every_stage_is_covered_or_reads_files():
    """Every stage runs under generated tables, or reads files of its own (FILE_INPUTS); the lists
    name no stage that does not exist."""
    assert set(CASES) | set(FILE_INPUTS) <= set(all_stages()) and not set(CASES) & set(FILE_INPUTS)
    for name in GENERATED:
        stage = importlib.import_module(stage_module(name)).STAGE
        tables = [n for n, spec in stage.inputs.items() if spec.kind == "table" and (spec.table or n in case_of(stage).tables)]
        assert tables, f"{name} has no table input to generate: list it in FILE_INPUTS"


# --- drawing tables --------------------------------------------------------------------------------
def value(dtype: pa.DataType, name: str, contract, item: bool = False):
    """A strategy for one valid value of a column (or of a list column's item)."""
    allowed, bounds = contract.values.get(name), contract.ranges.get(name)
    if pa.types.is_list(dtype):
        return st.lists(value(dtype.value_type, name, contract, item=True), max_size=3)
    if pa.types.is_struct(dtype):
        declared = {*contract.values, *contract.ranges, *contract.patterns}  # a struct's field may have a contract of its own
        fields = {f.name: value(f.type, f"{name}.{f.name}" if f"{name}.{f.name}" in declared else f.name, contract) for f in dtype}
        return st.fixed_dictionaries({k: st.none() | v if f"{name}.{k}" in contract.nullable else v for k, v in fields.items()})
    if pa.types.is_map(dtype):
        return st.dictionaries(st.sampled_from(WORDS), value(dtype.item_type, name, contract), max_size=2).map(list)
    if allowed is not None and (item or not pa.types.is_list(dtype)):
        return st.sampled_from(sorted(allowed))
    if name in contract.patterns and pa.types.is_string(dtype):
        pattern = contract.patterns[name]
        shas = [v for v in SHA_POOL if re.fullmatch(pattern, v)]  # a sha256 in hex (or empty where allowed): from the pool
        return st.sampled_from(shas) if shas else st.from_regex(f"(?:{pattern})", fullmatch=True).filter(lambda v: len(v) < 6)
    if pa.types.is_string(dtype):
        idish = name in contract.key or name == "id" or name.endswith(("_id", "_ids", "_sha256")) or name in ("sha256", "shown")
        return st.sampled_from(ID_POOL) if idish else st.sampled_from(WORDS + ODD[1:4])
    if pa.types.is_boolean(dtype):
        return st.booleans()
    if pa.types.is_integer(dtype):
        low, high = bounds or (0, 5)
        low = 0 if low is None else int(low)
        return st.integers(low, low + 5 if high is None else int(high))
    if pa.types.is_floating(dtype):
        low, high = bounds or (0.0, 1.0)
        return st.floats(0.0 if low is None else low, (low or 0.0) + 10.0 if high is None else high)
    if pa.types.is_timestamp(dtype):
        return st.integers(0, 2_000_000_000)
    if pa.types.is_binary(dtype):
        return st.binary(max_size=8)
    raise NotImplementedError(dtype)


def off_value(dtype: pa.DataType, name: str, contract):
    """A value the contract forbids: off the declared set, outside the range, NaN."""
    item = dtype.value_type if pa.types.is_list(dtype) else dtype
    if name in contract.patterns:
        bad = st.just("not a match \u202e")
    elif name in contract.values:
        bad = st.sampled_from(["TEXT", "audio"] if pa.types.is_string(item) else [-7, 99])
    else:
        low, high = contract.ranges[name]
        options = [v for v in ((low - 3) if low is not None else None, (high + 7) if high is not None else None) if v is not None]
        if pa.types.is_floating(item):
            options.append(math.nan)
        bad = st.sampled_from(options)
    return bad.map(lambda v: [v] if pa.types.is_list(dtype) else v)


def struct_fields(schema: pa.Schema, contract) -> list[tuple[str, str]]:
    """(column, field) of every struct field (in a struct column or a list of them) declared not null."""
    found = []
    for f in schema:
        struct = f.type.value_type if pa.types.is_list(f.type) else f.type
        if pa.types.is_struct(struct):
            found += [(f.name, g.name) for g in struct if f"{f.name}.{g.name}" not in contract.nullable]
    return found


def has_null_field(row: dict, fields: list[tuple[str, str]]) -> bool:
    for column, name in fields:
        value = row[column]
        if any(item is not None and item[name] is None for item in (value if isinstance(value, list) else [value] if value else [])):
            return True
    return False


@st.composite
def table_rows(draw, table: str, max_rows: int = 6) -> tuple[list[dict], int]:
    """(rows, how many rows have a null in a column, or a struct field, declared not null)."""
    schema, contract = table_schema(table), table_contract(table)
    fields = struct_fields(schema, contract)
    offable = sorted(c for c in {*contract.values, *contract.ranges, *contract.patterns} if "." not in c)  # top-level columns
    rows = []
    for _ in range(draw(st.integers(0, max_rows))):
        row = {f.name: draw(st.none() | value(f.type, f.name, contract) if f.name in contract.nullable else value(f.type, f.name, contract))
               for f in schema}
        spoil = draw(st.sampled_from(["none"] * 5 + ["null", "null_field", "off", "odd", "repeat"]))  # most rows reach the stage
        if spoil == "null":
            column = draw(st.sampled_from(schema.names))
            row[column] = None
        elif spoil == "null_field" and fields:
            column, name = draw(st.sampled_from(fields))
            items = row[column] if isinstance(row[column], list) else [row[column]]
            if items and items[0] is not None:
                items[draw(st.integers(0, len(items) - 1))][name] = None
        elif spoil == "off" and offable:
            column = draw(st.sampled_from(offable))
            row[column] = draw(off_value(schema.field(column).type, column, contract))
        elif spoil == "odd":
            strings = [f.name for f in schema if pa.types.is_string(f.type)]
            if strings:
                row[draw(st.sampled_from(strings))] = draw(st.sampled_from(ODD))
        elif spoil == "repeat" and rows and contract.key:
            row.update({k: rows[-1][k] for k in contract.key})
        rows.append(row)
    bad = sum(1 for row in rows if any(row[f.name] is None for f in schema if f.name not in contract.nullable) or has_null_field(row, fields))
    return rows, bad


@st.composite
def input_files(draw, folder: Path, name: str, table: str, many: bool) -> tuple[list[Path], int]:
    """The input written as one or two Parquet files, some columns in a castable wrong type."""
    rows, bad = draw(table_rows(table))
    schema = table_schema(table)
    data = pa.Table.from_pylist(rows, schema=schema)
    for f in schema:
        if f.type in CASTS and draw(st.integers(0, 5)) == 0:
            try:
                data = data.set_column(schema.get_field_index(f.name), pa.field(f.name, CASTS[f.type]), data.column(f.name).cast(CASTS[f.type]))
            except pa.ArrowInvalid:  # a value that does not fit the narrower type: keep the declared one
                pass
    cut = draw(st.integers(0, len(rows))) if many and draw(st.booleans()) else len(rows)
    paths = []
    for k, part in enumerate([data.slice(0, cut), data.slice(cut)] if cut < len(rows) else [data]):
        path = folder / f"{name}.{k}.parquet"
        pq.write_table(part, path)
        paths.append(path)
    return paths, bad


# --- running a stage -------------------------------------------------------------------------------
SUFFIXES = {"JSON": ".json", "CSV": ".csv", "PNG": ".png", "SVG": ".svg", "DuckDB": ".duckdb", "HTML": ".html", "markdown": ".md",
            "report.md": ".md"}


def output_path(folder: Path, name: str, spec) -> Path:
    if spec.table:
        return folder / f"{name}.parquet"
    suffix = next((s for word, s in SUFFIXES.items() if word in spec.help), "")
    return folder / f"{name}{suffix}"


def run_case(env: Env, stage, case: Case, data) -> None:
    example = env.tmp / f"ex{len(list(env.tmp.glob('ex*')))}"
    ins, outs = example / "in", example / "out"
    ins.mkdir(parents=True)
    outs.mkdir()
    args, bad_rows = [], {}
    for name, path in case.files(env).items():
        args.append(f"--input={name}={path}")
    for name, spec in stage.inputs.items():
        table = spec.table or case.tables.get(name)
        if spec.kind != "table" or table is None or (spec.optional and not data.draw(st.booleans(), label=f"give {name}")):
            continue
        paths, bad = data.draw(input_files(ins, name, table, spec.many), label=name)
        args += [f"--input={name}={p}" for p in paths]
        bad_rows[name] = bad if spec.table else 0  # a table of the caller's choosing has no contract to keep
    outputs = {name: output_path(outs, name, spec) for name, spec in stage.outputs.items()}
    args += [f"--output={name}={path}" for name, path in outputs.items()]
    args += ["--params", json.dumps(case.params(env))]
    env_vars = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    result = subprocess.run([sys.executable, "-m", stage_module(stage.name), *args], cwd=example, env=env_vars,
                            capture_output=True, text=True, timeout=300)
    stores = [v for v in case.params(env).values() if isinstance(v, str) and "/" in v]  # stores the stage reads (images, PDFs)
    check(stage, result, outputs, bad_rows, [a for a in args if a.startswith("--input=")], stores)


def check(stage, result, outputs: dict[str, Path], bad_rows: dict[str, int], input_args: list[str], stores: list[str]) -> None:
    err = result.stderr
    assert "Traceback" not in err, f"{stage.name} crashed on {input_args}:\n{err[-4000:]}"
    if result.returncode != 0:
        last = err.strip().splitlines()[-1] if err.strip() else ""
        assert last.startswith(f"{stage.name}: error: "), f"{stage.name} failed without its one line:\n{err[-3000:]}"
        names = [a.split("=", 2)[1] for a in input_args] + [a.split("=", 2)[2] for a in input_args] + stores + ["input"]
        assert any(n in last for n in names), f"{stage.name} failed with a line that names no input: {last}"
        left = list(next(iter(outputs.values())).parent.iterdir())
        assert not left, f"{stage.name} failed and left {left}"
        return
    base = next(iter(outputs.values()))
    report = json.loads(Path(f"{base}.report.json").read_text())
    rejects = pq.read_table(f"{base}.rejects.parquet")
    assert rejects.num_rows == report["rejected"], (rejects.num_rows, report)
    counted = 0
    for name, spec in stage.outputs.items():
        if spec.table:
            table = pq.read_table(outputs[name])
            assert table.num_rows == report["rows_out"][name], (name, report["rows_out"])
            key = table_contract(spec.table).key
            if key:
                keys = list(zip(*(table.column(k).to_pylist() for k in key)))
                assert len(set(keys)) == len(keys), f"{stage.name}: output {name!r} repeats a key"
        if spec.counted:
            counted += report["rows_out"].get(name, 0)
    if stage.invariant is None:
        assert report["rows_in"] == counted + report["rejected"], report
    for name, bad in bad_rows.items():  # rows with a null where the table allows none never reach the stage
        assert report["rejected_on_read"].get(name, 0) >= bad, (name, bad, report["rejected_on_read"])
    on_read = sum(1 for r in rejects.column("reason").to_pylist() if r in CONTRACT_REJECTS)
    assert on_read >= sum(report["rejected_on_read"].values())


# --- the test --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from mavis_eval_fixtures import build_release

    folder = tmp_path_factory.mktemp("contract")
    release = build_release(folder / "mavis_release" / "v1")
    tiny = folder / "tiny_vlm"
    try:
        from tiny_vlm import build_tiny_vlm

        build_tiny_vlm(tiny)
    except ImportError:  # transformers missing: those two stages are skipped below
        tiny = None
    labels = folder / "judge_labels.csv"  # every kind of label, on judgements the id pool names and one it never does
    labels.write_text("judgement_id,human_score,annotator\nk1,1,a\nk1,0.5,b\nk2,partially supported,a\nk3,maybe,a\n"
                      "reddit:p1/c1,,a\nnone-such,0,a\n")
    with plain_llm_server() as url:
        yield Env(folder / "runs", url, release, tiny, labels)


@pytest.mark.parametrize("name", GENERATED)
def test_stage_keeps_its_contract_under_generated_input(env, name):
    stage = importlib.import_module(stage_module(name)).STAGE
    if env.tiny_vlm is None and name in ("generate_attributed", "mcitebench_attention"):
        pytest.skip("transformers is not installed")
    env.tmp.mkdir(exist_ok=True)
    stage_env = Env(env.tmp / name, env.llm_url, env.release, env.tiny_vlm, env.judge_labels)
    stage_env.tmp.mkdir(exist_ok=True)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=SEED is None, database=None, phases=[Phase.explicit, Phase.generate],  # no shrinking: each try is a process
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
    @given(st.data())
    def run(data):
        run_case(stage_env, stage, case_of(stage), data)

    if SEED is not None:
        run = seed(int(SEED))(run)

    run()
