"""The stage contract: CLI, params, atomic writes, schema checks, sidecars and the count invariant."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from stages.core import tables
from stages.core.ids import content_id, shard_of
from stages.core.declarations import declared_meaning
from stages.core.prompts import PromptError, PromptLibrary
from stages.core.stage import Context, Input, Output, Param, Reject, Stage, StageError
from stages.core.tables import SchemaError, parse_type, table_schema, write_table


@pytest.fixture
def schema_dir(tmp_path, monkeypatch):
    folder = tmp_path / "schemas"
    folder.mkdir()
    (folder / "things.yaml").write_text(
        "table: things\ncolumns:\n  id: string\n  n: int64\n  tags: list<string>\n  meta: struct<a:string, b:list<int64>>\n"
    )
    monkeypatch.setattr(tables, "SCHEMA_DIR", folder)
    table_schema.cache_clear()
    yield folder
    table_schema.cache_clear()


def _stage(run, invariant=None):
    return Stage(
        name="things",
        version="1",
        doc="Make things.",
        inputs={"seed": Input("a seed file", optional=True, kind="file")},
        outputs={"out": Output("things", "the things")},
        params={"k": Param(int, 2, "multiplier"), "label": Param(str, help="required label")},
        run=run,
        invariant=invariant,
        rejects={"too_big": "n is above the limit"},
    )


def _rows(n, k=1):
    return [{"id": f"t{i}", "n": i * k, "tags": ["x"], "meta": {"a": "m", "b": [i]}} for i in range(n)]


def test_run_writes_table_rejects_and_report(tmp_path, schema_dir):
    def run(ctx):
        for row in _rows(5, ctx.params["k"]):
            ctx.add_input()
            if row["n"] == 6:
                ctx.reject(row["id"], "too_big", "n=6")
            else:
                ctx.write("out", [row])

    out = tmp_path / "o" / "things.parquet"
    _stage(run).main(["--output", f"out={out}", "--params", '{"k": 3, "label": "x"}'])
    assert pq.read_table(out).num_rows == 4
    rejects = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert rejects == [{"id": "t2", "stage": "things", "reason": "too_big", "detail": "n=6"}]
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert (report["rows_in"], report["rows_out"], report["rejected"]) == (5, {"out": 4}, 1)
    assert report["rejected_by_reason"] == {"too_big": 1}
    assert report["params"] == {"k": 3, "label": "x"}


def test_broken_invariant_fails_and_leaves_nothing(tmp_path, schema_dir):
    def run(ctx):
        ctx.add_input(3)  # three read, two written, none rejected: one row lost silently
        ctx.write("out", _rows(2))

    out = tmp_path / "out" / "things.parquet"
    with pytest.raises(SystemExit, match="count invariant broken: rows in 3 != rows out 2 \\+ rejected 0"):
        _stage(run).main(["--output", f"out={out}", "--param", "label=x"])
    assert list(out.parent.iterdir()) == []  # no output, no temp file


def test_exception_midway_leaves_no_partial_output(tmp_path, schema_dir):
    def run(ctx):
        writer = ctx.writer("out")
        writer.batch_rows = 2
        for row in _rows(5):
            writer.write(row)  # two batches reach the temp file before the failure
        raise RuntimeError("killed")

    out = tmp_path / "out" / "things.parquet"
    with pytest.raises(RuntimeError, match="killed"):
        _stage(run).main(["--output", f"out={out}", "--param", "label=x"])
    assert list(out.parent.iterdir()) == []


def test_wrong_column_type_names_table_and_column(tmp_path, schema_dir):
    rows = _rows(2)
    rows[1]["n"] = "seven"
    with pytest.raises(SchemaError, match=r"table 'things', column 'n': expected int64; row 1 \(id='t1'\) has 'seven'"):
        write_table(tmp_path / "t.parquet", rows, "things")
    assert not (tmp_path / "t.parquet").exists()


def test_missing_and_unexpected_columns(tmp_path, schema_dir):
    with pytest.raises(SchemaError, match="column 'tags': missing in row 0"):
        write_table(tmp_path / "t.parquet", [{"id": "a", "n": 1, "meta": None}], "things")
    with pytest.raises(SchemaError, match=r"unexpected columns \['extra'\]"):
        write_table(tmp_path / "t.parquet", [{**_rows(1)[0], "extra": 1}], "things")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--param", "label=x", "--param", "k=two"], "param 'k' must be int, got str 'two'"),
        (["--param", "label=x", "--param", "kk=2"], "unknown param(s) ['kk']"),
        ([], "param 'label' is required"),
        (["--params", "[1, 2]"], "--params must be a mapping, got list"),  # inline JSON, not a file named [1, 2]
        (["--param", "label=x", "--input", "seed=/nonexistent/file"], "input 'seed': /nonexistent/file does not exist"),
        (["--param", "label=x", "--input", "sed=/tmp"], "unknown input(s) ['sed']"),
    ],
)
def test_bad_invocations_fail_with_clear_errors(tmp_path, schema_dir, argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        _stage(lambda ctx: None).main(["--output", f"out={tmp_path / 't.parquet'}", *argv])
    assert message in str(exc.value)


def test_params_file(tmp_path, schema_dir):
    params = tmp_path / "p.yaml"
    params.write_text("k: 4\nlabel: from-file\n")
    seen = {}

    def run(ctx):
        seen.update(ctx.params)

    _stage(run).main(["--output", f"out={tmp_path / 't.parquet'}", "--params", str(params)])
    assert seen == {"k": 4, "label": "from-file"}


def test_help_lists_inputs_outputs_params(capsys, schema_dir):
    with pytest.raises(SystemExit):
        _stage(lambda ctx: None).main(["--help"])
    text = capsys.readouterr().out
    for expected in ("Make things.", "seed", "a seed file", "table things", "k ", "int [2]: multiplier", "label", "required",
                     "reject reasons:", "too_big", "n is above the limit"):
        assert expected in text
    example = text.split("example (")[1]  # what the stage cannot run without, as flags
    assert "--output out=out.parquet" in example and "--param label=VALUE" in example and "--param k=" not in example


@pytest.mark.parametrize("how", ["raise", "reject", "reject_many"])
def test_an_undeclared_reject_reason_fails_the_stage(tmp_path, schema_dir, how):
    """Rejecting with a reason the stage does not declare stops it with one line naming the stage
    and the reason, and leaves no output, whichever way the reject is made."""
    def run(ctx):
        for row in _rows(3):
            with ctx.item(row["id"]):
                if row["n"] == 0:
                    raise Reject("too_big", "declared: fine")
                if row["n"] == 1:
                    if how == "raise":
                        raise Reject("too_small", "n=1")
                    if how == "reject":
                        ctx.reject(row["id"], "too_small", "n=1")
                    else:
                        ctx.reject_many([row["id"], "t9"], ["too_big", "too_small"], ["", "n=1"])
                ctx.write("out", [row])

    out = tmp_path / "o" / "things.parquet"
    with pytest.raises(SystemExit) as failed:
        _stage(run).main(["--output", f"out={out}", "--param", "label=x"])
    assert str(failed.value) == ("things: error: stage things rejected an item with undeclared reason 'too_small'; "
                                 "declare it in STAGE.rejects")
    assert list(out.parent.iterdir()) == []


def test_a_declared_pattern_reason_covers_its_codes(tmp_path, schema_dir):
    """`http_<status>` declares the fetch layer's http_404, http_503...: digits only."""
    def run(ctx):
        ctx.reject_many(["a", "b"], ["http_404", "http_503"], ["", ""])
        ctx.add_input(3)
        with ctx.item("c", counted=False):
            raise Reject("http_4x4")

    stage = Stage("fetcher", "1", None, {}, {"out": Output("things")}, {}, run=run,
                  rejects={"http_<status>": "the server answered this HTTP error status"})
    with pytest.raises(StageError, match="undeclared reason 'http_4x4'"):
        Context(stage, {}, {"out": [str(tmp_path / "f.parquet")]}, {}).execute()
    assert declared_meaning(stage.rejects, "http_404") == "the server answered this HTTP error status"
    assert declared_meaning(stage.rejects, "http_") is None and declared_meaning(stage.rejects, "xhttp_404") is None


def test_rendering_an_undeclared_prompt_fails_the_stage(tmp_path, schema_dir):
    """Inside a stage run only the prompts the stage declares render; outside one, any does."""
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "greet.md").write_text("---\nkind: text\n---\nHello {{ name }}\n")
    (prompts / "other.md").write_text("---\nkind: text\n---\nBye {{ name }}\n")
    library = PromptLibrary(prompts)
    rendered = []

    def run(ctx):
        rendered.append(library.get("greet").render({"name": "x"}))
        library.get("other").render({"name": "x"})

    stage = Stage("greeter", "1", None, {}, {"out": Output("things")}, {}, run=run, prompts=("greet",))
    with pytest.raises(PromptError, match="stage greeter renders prompt 'other', which it does not declare; add it to STAGE.prompts"):
        Context(stage, {}, {"out": [str(tmp_path / "g.parquet")]}, {}).execute()
    assert rendered == [[{"role": "user", "content": "Hello x"}]]
    assert library.get("other").render({"name": "y"}) == [{"role": "user", "content": "Bye y"}]  # no stage running


def test_type_language():
    assert str(parse_type("list<struct<a:string, b:map<string, float64>>>")) == (
        "list<item: struct<a: string, b: map<string, double>>>"
    )
    with pytest.raises(SchemaError, match="unknown column type 'decimal'"):
        parse_type("decimal")


def test_ids_are_stable_and_content_derived():
    assert content_id("q", "a", "bc") == content_id("q", "a", "bc")
    assert content_id("q", "ab", "c") != content_id("q", "a", "bc")
    # pinned values: ids and shards must not drift between versions or machines
    assert content_id("q", "x") == "q:5bd09fcd1c836b9c"
    assert shard_of("reddit:abc", 7) == 4
    shards = [shard_of(f"reddit:{i}", 4) for i in range(1000)]
    assert shards == [shard_of(f"reddit:{i}", 4) for i in range(1000)]
    assert set(shards) == {0, 1, 2, 3}
    assert shard_of("anything", 1) == 0


def test_stage_error_is_raised_for_file_outputs(tmp_path, schema_dir):
    stage = Stage("f", "1", None, {}, {"file": Output(None, "a file")}, {}, run=lambda ctx: None)
    with pytest.raises(StageError, match="output 'file' was not written"):
        Context(stage, {}, {"file": [str(tmp_path / "x.json")]}, {}).execute()


def test_release_is_not_published_when_counts_do_not_add_up(tmp_path):
    import pyarrow as pa

    from stages.core.release import publish_release

    def run(ctx):
        ctx.add_input(3)
        publish_release(ctx, {"questions": pa.table({"id": ["a", "b"]})}, lambda name, version: "# card")

    stage = Stage("rel", "1", None, {}, {"manifest": Output(None, "manifest")},
                  {"name": Param(str, "r"), "releases_dir": Param(str, str(tmp_path / "releases"))}, run=run)
    with pytest.raises(SystemExit, match="rows in 3 != rows out 2 \\+ rejected 0"):
        stage.main(["--output", f"manifest={tmp_path / 'release.json'}"])
    assert not (tmp_path / "releases").exists() and not (tmp_path / "release.json").exists()


def test_every_table_input_of_every_stage_names_its_columns():
    """Each stage's table inputs declare a schema that exists (or the params naming their columns),
    so the runner checks every input file before the stage reads it."""
    import importlib

    from stages.core.declarations import stage_files
    from stages.core.layout import stage_module

    names = sorted(p.stem for p in stage_files())  # stage modules, not a family's helper modules
    assert len(names) > 20
    for name in names:
        stage = importlib.import_module(stage_module(name)).STAGE
        for input_name, spec in stage.inputs.items():
            if spec.kind != "table":
                continue
            assert spec.table or spec.column_params, f"{name}: input {input_name!r} names no table"
            if spec.table:
                table_schema(spec.table)  # the schema file exists and parses
            assert set(spec.column_params) <= set(stage.params), f"{name}: input {input_name!r}"


# --- the table contract: nulls, declared values and ranges, keys (issue 32) ----------------------
SCORED = """table: scored
key: id
columns:
  id: string
  modality: string
  score: float64
  note: string
  tags: list<string>
nullable: [note]
values:
  modality: [text, image]
range:
  score: [0, 1]
pattern:
  tags: "[a-z]+"
"""


@pytest.fixture
def scored_dir(schema_dir):
    (schema_dir / "scored.yaml").write_text(SCORED)
    tables.table_schema.cache_clear()
    return schema_dir


def _scored(id_, modality="text", score=0.5, note=None, tags=("a",)):
    return {"id": id_, "modality": modality, "score": score, "note": note, "tags": list(tags)}


def _reading_stage(seen: list):
    def run(ctx):
        table = ctx.read("rows")
        assert ctx.read("rows") is table  # read once: the rejects are written once
        for row in table.to_pylist():
            with ctx.item(row["id"]):
                seen.append(row["id"])
                ctx.write("out", [row])

    return Stage("reader", "1", None, {"rows": Input("scored rows", many=True, table="scored")}, {"out": Output("scored", "kept")}, {},
                 run=run)


def test_rows_that_break_the_contract_are_rejected_before_the_stage_sees_them(tmp_path, scored_dir):
    import pyarrow as pa

    first = [_scored("a"), _scored(None), _scored("b", modality="audio"), _scored("c", score=float("nan")), _scored("d", score=7.0)]
    second = [_scored("e", score=-3.0), _scored("a", score=0.9), _scored("f", tags=["x", None]), _scored("g", modality=None),
              _scored(""), _scored("h", note="fine"), _scored("i", tags=["ok", "A1"])]
    paths = []
    for k, rows in enumerate((first, second)):  # two shards: the repeated key spans them
        paths.append(tmp_path / f"in{k}.parquet")
        pq.write_table(pa.Table.from_pylist(rows, schema=table_schema("scored")), paths[-1])
    seen: list = []
    out = tmp_path / "o" / "out.parquet"
    _reading_stage(seen).main([*(f"--input=rows={p}" for p in paths), f"--output=out={out}"])
    assert seen == ["a", "h"]
    rejects = {(r["id"], r["reason"]): r["detail"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}
    assert rejects == {
        ("in0.parquet row 1", "null_column"): "column 'id' is null (input 'rows', in0.parquet row 1)",
        ("b", "bad_value"): "column 'modality' is 'audio', not one of ['image', 'text'] (input 'rows', in0.parquet row 2)",
        ("c", "bad_value"): "column 'score' is nan, not in [0, 1] (input 'rows', in0.parquet row 3)",
        ("d", "bad_value"): "column 'score' is 7.0, not in [0, 1] (input 'rows', in0.parquet row 4)",
        ("e", "bad_value"): "column 'score' is -3.0, not in [0, 1] (input 'rows', in1.parquet row 0)",
        ("a", "duplicate_id"): "key 'a' repeats row 0 (input 'rows', in1.parquet row 1)",
        ("f", "null_column"): "column 'tags' holds a null item (input 'rows', in1.parquet row 2)",
        ("g", "null_column"): "column 'modality' is null (input 'rows', in1.parquet row 3)",
        ("in1.parquet row 4", "bad_value"): "key column 'id' is empty (input 'rows', in1.parquet row 4)",
        ("i", "bad_value"): "column 'tags' holds 'A1', not matching '[a-z]+' (input 'rows', in1.parquet row 6)",
    }
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert (report["rows_in"], report["rows_out"], report["rejected"]) == (12, {"out": 2}, 10)
    assert report["rejected_on_read"] == {"rows": 10}
    assert report["rejected_by_reason"] == {"bad_value": 6, "duplicate_id": 1, "null_column": 3}


def _docs_shards(tmp_path, schema_dir, schema: str, shards: list[list[dict]]) -> list[Path]:
    """The `docs` table declared by `schema`, written as one Parquet file per shard."""
    import pyarrow as pa

    (schema_dir / "docs.yaml").write_text(schema)
    tables.table_schema.cache_clear()
    paths = [tmp_path / f"docs{k}.parquet" for k in range(len(shards))]
    for path, rows in zip(paths, shards):
        pq.write_table(pa.Table.from_pylist(rows, schema=table_schema("docs")), path)
    return paths


def _run_docs_reader(run, paths: list[Path], out: Path) -> None:
    Stage("reader", "1", None, {"rows": Input("docs", many=True, table="docs")}, {"out": Output("docs", "kept")}, {}, run=run).main(
        [*(f"--input=rows={p}" for p in paths), f"--output=out={out}"])


def _kept_and_rejected(tmp_path: Path, paths: list[Path]) -> tuple[list[str], dict[str, tuple[str, str]]]:
    """(ids of the rows a pass-through stage sees, in order; id -> (reason, detail) of its rejects)."""
    seen: list = []

    def run(ctx):
        for row in ctx.read("rows").to_pylist():
            with ctx.item(row["id"]):
                seen.append(row["id"])
                ctx.write("out", [row])

    out = tmp_path / "o" / "out.parquet"
    _run_docs_reader(run, paths, out)
    return seen, {r["id"]: (r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()}


def test_a_table_whose_shards_may_share_a_row_reads_a_whole_row_repeat_once(tmp_path, schema_dir):
    """`repeats: same_row` (MAVIS documents: one passage retrieved in two shards): a row equal in
    every column to an earlier one is read once and counted; a repeated key with another value is
    still a duplicate_id, named at its place in the files as written."""
    paths = _docs_shards(tmp_path, schema_dir, "table: docs\nkey: id\nrepeats: same_row\ncolumns:\n  id: string\n  text: string\n  url: string\nnullable: [url]\n",
                         [[{"id": "a", "text": "x", "url": None}, {"id": "b", "text": "y", "url": "u"}],
                          [{"id": "a", "text": "x", "url": None}, {"id": "c", "text": "z", "url": None}, {"id": "b", "text": "other", "url": "u"}]])
    seen: list = []

    def run(ctx):
        for row in ctx.read("rows").to_pylist():
            with ctx.item(row["id"]):
                seen.append((row["id"], row["text"]))
                ctx.write("out", [row])

    out = tmp_path / "o" / "out.parquet"
    _run_docs_reader(run, paths, out)
    assert seen == [("a", "x"), ("b", "y"), ("c", "z")]
    rejects = [(r["id"], r["reason"], r["detail"]) for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()]
    assert rejects == [("b", "duplicate_id", "key 'b' repeats row 1 (input 'rows', docs1.parquet row 2)")]
    report = json.loads(Path(f"{out}.report.json").read_text())
    assert report["stats"]["rows_repeated_rows"] == 1 and (report["rows_in"], report["rejected"]) == (4, 1)
    (schema_dir / "nested.yaml").write_text("table: nested\nrepeats: same_row\ncolumns:\n  id: string\n  tags: list<string>\n")
    with pytest.raises(tables.SchemaError, match="repeats: same_row needs flat columns"):
        table_schema("nested")


def test_a_struct_field_is_not_null_unless_declared_so(tmp_path, schema_dir):
    """A field of a list of structs (or of a struct) may be null only when `nullable` names it
    (`docs.url`): a null in another field is the row's null_column reject on read, naming the field,
    and a writer that writes one fails naming it. A null struct (a nullable column) has no fields to check."""
    schema = ("table: docs\nkey: id\ncolumns:\n  id: string\n  parts: list<struct<text:string, url:string>>\n"
              "  main: struct<text:string, url:string>\nnullable: [main, parts.url, main.url]\n")
    part = lambda text, url=None: {"text": text, "url": url}  # noqa: E731
    paths = _docs_shards(tmp_path, schema_dir, schema, [[
        {"id": "a", "parts": [part("x"), part("y", "u")], "main": None},
        {"id": "b", "parts": [part("x"), part(None, "u")], "main": part("m")},
        {"id": "c", "parts": [], "main": part(None)},
        {"id": "d", "parts": [part("x")], "main": part("m", "u")},
    ]])
    seen, rejects = _kept_and_rejected(tmp_path, paths)
    assert seen == ["a", "d"]
    assert rejects == {"b": ("null_column", "field 'parts.text' is null (input 'rows', docs0.parquet row 1)"),
                       "c": ("null_column", "field 'main.text' is null (input 'rows', docs0.parquet row 2)")}
    with pytest.raises(tables.SchemaError, match=r"row 0 \(e\): null_column: field .parts.text. is null"):
        tables.write_table(tmp_path / "w.parquet", [{"id": "e", "parts": [part(None)], "main": None}], "docs")
    (schema_dir / "odd.yaml").write_text("table: odd\ncolumns:\n  id: string\n  parts: list<struct<text:string>>\nnullable: [parts.url]\n")
    with pytest.raises(tables.SchemaError, match=r"nullable names columns \['parts.url'\]"):
        table_schema("odd")


def test_spans_lie_within_their_text_in_order(tmp_path, schema_dir):
    """`spans: {marks: text}`: each item's [start, end) is a slice of the row's text, counted in
    characters as Python slices are, in order and not overlapping the one before; any other is the
    row's bad_value reject on read, naming the span, and a writer that writes one fails. A schema
    whose span column has no start and end fails when it is loaded."""
    schema = ("table: docs\nkey: id\ncolumns:\n  id: string\n  text: string\n  marks: list<struct<n:int32, start:int32, end:int32>>\n"
              "spans:\n  marks: text\n")
    mark = lambda start, end: {"n": 1, "start": start, "end": end}  # noqa: E731
    text = "é ![a](image_1) then ![b](image_2)"  # a two-byte character first: offsets count characters
    spans = [(m.start(), m.end()) for m in re.finditer(r"!\[[^\]]*\]\([^)]*\)", text)]
    paths = _docs_shards(tmp_path, schema_dir, schema, [[
        {"id": "a", "text": text, "marks": [mark(*s) for s in spans]},
        {"id": "b", "text": text, "marks": [mark(spans[0][0], len(text) + 1)]},
        {"id": "c", "text": text, "marks": [mark(*spans[1]), mark(*spans[0])]},
        {"id": "d", "text": text, "marks": [mark(-1, 3)]},
        {"id": "e", "text": "", "marks": []},
        {"id": "f", "text": "abcdef", "marks": [mark(0, 2), mark(2, 4), mark(4, 4)]},
    ]])
    seen, rejects = _kept_and_rejected(tmp_path, paths)
    assert seen == ["a", "e", "f"]
    assert rejects == {
        "b": ("bad_value", f"column 'marks' holds the span [2, {len(text) + 1}), which is not within 'text' ({len(text)} characters) (input 'rows', docs0.parquet row 1)"),
        "c": ("bad_value", f"column 'marks' holds the span [{spans[0][0]}, {spans[0][1]}), which starts before the one before it ends (input 'rows', docs0.parquet row 2)"),
        "d": ("bad_value", "column 'marks' holds the span [-1, 3), which is not within 'text' (34 characters) (input 'rows', docs0.parquet row 3)"),
    }
    with pytest.raises(tables.SchemaError, match=r"row 0 \(g\): bad_value: column 'marks' holds the span \[0, 9\)"):
        tables.write_table(tmp_path / "w.parquet", [{"id": "g", "text": "abc", "marks": [mark(0, 9)]}], "docs")
    (schema_dir / "odd.yaml").write_text("table: odd\ncolumns:\n  id: string\n  text: string\n  marks: list<struct<n:int32>>\nspans:\n  marks: text\n")
    with pytest.raises(tables.SchemaError, match=r"spans: 'marks' must be a list of structs with integer start and end"):
        table_schema("odd")


def test_count_rows_counts_each_files_rows_that_keep_the_contract_a_batch_at_a_time(tmp_path, schema_dir, monkeypatch):
    """count_rows reads an input a batch at a time (here 2 rows) and counts the rows that keep the
    contract per file and value; a row with a null the contract forbids is this stage's reject,
    named by its file and row, as `read` names it. A table with a key cannot be counted so."""
    monkeypatch.setattr(tables, "BATCH_ROWS", 2)
    paths = _docs_shards(tmp_path, schema_dir, "table: docs\ncolumns:\n  id: string\n  text: string\n",
                         [[{"id": "a", "text": "x"}, {"id": "b", "text": "y"}, {"id": "c", "text": "x"}, {"id": None, "text": "x"},
                           {"id": "e", "text": "x"}], [], [{"id": "f", "text": "y"}]])
    counted: list = []

    def run(ctx):
        counted.extend(ctx.count_rows("rows", ["text"]).to_pylist())
        ctx.add_input(0)

    out = tmp_path / "o" / "out.parquet"
    _run_docs_reader(run, paths, out)
    assert counted == [{"file": str(paths[0]), "text": "x", "rows": 3}, {"file": str(paths[0]), "text": "y", "rows": 1},
                       {"file": str(paths[2]), "text": "y", "rows": 1}]
    [reject] = pq.read_table(f"{out}.rejects.parquet").to_pylist()
    assert (reject["id"], reject["reason"]) == ("docs0.parquet row 3", "null_column") and reject["detail"].endswith("(input 'rows', docs0.parquet row 3)")

    import pyarrow as pa

    pq.write_table(pa.table({"id": ["a"], "text": ["x"], "n": ["ten"]}), tmp_path / "words.parquet")  # n: text where int64 is declared
    (schema_dir / "docs.yaml").write_text("table: docs\ncolumns:\n  id: string\n  text: string\n  n: int64\n")
    tables.table_schema.cache_clear()
    with pytest.raises(SystemExit, match=r"input 'rows': .*words.parquet \(table 'docs'\): column 'n' is string, expected int64"):
        _run_docs_reader(run, [tmp_path / "words.parquet"], tmp_path / "w" / "out.parquet")

    keyed = _docs_shards(tmp_path, schema_dir, "table: docs\nkey: id\ncolumns:\n  id: string\n  text: string\n", [[{"id": "a", "text": "x"}]])
    with pytest.raises(ValueError, match="table 'docs' has a key"):
        _run_docs_reader(run, keyed, tmp_path / "k" / "out.parquet")


def test_a_castable_column_type_is_cast_and_a_value_that_does_not_convert_fails_naming_it(tmp_path, scored_dir):
    import pyarrow as pa

    seen: list = []
    table = pa.Table.from_pylist([_scored("a")], schema=table_schema("scored"))
    wide = table.set_column(0, pa.field("id", pa.large_string()), table.column("id").cast(pa.large_string()))
    pq.write_table(wide, tmp_path / "wide.parquet")
    _reading_stage(seen).main([f"--input=rows={tmp_path / 'wide.parquet'}", f"--output=out={tmp_path / 'o' / 'out.parquet'}"])
    assert seen == ["a"]
    words = table.set_column(2, "score", pa.array(["high"]))
    pq.write_table(words, tmp_path / "words.parquet")
    with pytest.raises(SystemExit, match=r"input 'rows': .*words.parquet \(table 'scored'\): column 'score' is string, expected double"):
        _reading_stage([]).main([f"--input=rows={tmp_path / 'words.parquet'}", f"--output=out={tmp_path / 'p' / 'out.parquet'}"])
    assert not (tmp_path / "p").exists() or not any((tmp_path / "p").iterdir())


def test_writing_a_row_the_contract_forbids_fails_in_one_line(tmp_path, scored_dir):
    with pytest.raises(SchemaError, match=r"table 'scored': row 0 \(b\): bad_value: column 'score' is 2.0, not in \[0, 1\]"):
        write_table(tmp_path / "t.parquet", [_scored("b", score=2.0)], "scored")

    def run(ctx):
        ctx.add_input()
        ctx.write("out", [_scored(None)])

    stage = Stage("writer", "1", None, {}, {"out": Output("scored", "rows")}, {}, run=run)
    out = tmp_path / "o" / "out.parquet"
    with pytest.raises(SystemExit, match=r"writer: error: cannot write: table 'scored': row 0 \(no key\): null_column: column 'id' is null"):
        stage.main([f"--output=out={out}"])
    assert list(out.parent.iterdir()) == []


def test_a_key_repeated_across_write_batches_fails_at_the_commit(tmp_path, scored_dir):
    def run(ctx):
        writer = ctx.writer("out")
        writer.batch_rows = 2
        for id_ in ("a", "b", "c", "a"):
            ctx.add_input()
            writer.write(_scored(id_))

    stage = Stage("writer", "1", None, {}, {"out": Output("scored", "rows")}, {}, run=run)
    out = tmp_path / "o" / "out.parquet"
    with pytest.raises(SystemExit, match=r"cannot write: table 'scored': row 3 \(a\): duplicate_id: key 'a' repeats row 0"):
        stage.main([f"--output=out={out}"])
    assert list(out.parent.iterdir()) == []


def test_a_contract_on_a_struct_field_rejects_the_row_holding_a_bad_item(tmp_path, schema_dir):
    """values/range name a field of a list-of-struct column: a retrieved document's modality."""
    import pyarrow as pa

    (schema_dir / "shown.yaml").write_text("table: shown\nkey: id\ncolumns:\n  id: string\n"
                                          "  documents: list<struct<number:int32, modality:string>>\n"
                                          "values:\n  documents.modality: [text, image]\nrange:\n  documents.number: [1, null]\n")
    tables.table_schema.cache_clear()
    rows = [{"id": "a", "documents": [{"number": 1, "modality": "text"}, {"number": 2, "modality": "image"}]},
            {"id": "b", "documents": [{"number": 1, "modality": "text"}, {"number": 2, "modality": "\x00 control"}]},
            {"id": "c", "documents": [{"number": 0, "modality": "text"}]}, {"id": "d", "documents": []}]
    problems = tables.contract_problems(pa.Table.from_pylist(rows, schema=table_schema("shown")), tables.table_contract("shown"))
    assert problems == [(1, "bad_value", "column 'documents.modality' holds '\\x00 control', not one of ['image', 'text']"),
                        (2, "bad_value", "column 'documents.number' holds 0, not in [1, None]")]
    (schema_dir / "broken.yaml").write_text("table: broken\ncolumns:\n  id: string\n  documents: list<struct<number:int32>>\n"
                                           "values:\n  documents.modality: [text]\n")
    with pytest.raises(SchemaError, match=r"broken.yaml: values names columns \['documents.modality'\]"):
        tables.table_contract("broken")


def test_a_contract_naming_an_unknown_column_is_refused(scored_dir):
    (scored_dir / "broken.yaml").write_text("table: broken\nkey: idd\ncolumns:\n  id: string\nrange:\n  id: [0, 1]\n")
    with pytest.raises(SchemaError, match=r"broken.yaml: key names columns \['idd'\]"):
        tables.table_contract("broken")


def test_every_schema_file_states_a_valid_contract():
    """Each schemas/tables file parses with its contract (key, nullable, values, range)."""
    names = sorted(p.stem for p in tables.SCHEMA_DIR.glob("*.yaml"))
    for name in names:
        contract = tables.table_contract(name)
        assert set(contract.key) <= set(contract.columns)


def test_an_item_is_kept_or_rejected_never_both(tmp_path, schema_dir):
    """Rows written for an item that is then rejected would sit in the output of an item the card
    counts as rejected: the stage stops naming the item. An audit output (a row for every item
    judged, a judge's scores) may hold rows of rejected items."""
    def run(ctx):
        for row in _rows(3):
            with ctx.item(row["id"]):
                ctx.write("audit", [row])
                if row["id"] == "t1" and ctx.params["late"]:
                    ctx.write("out", [row])
                if row["id"] == "t1":
                    raise Reject("too_big", "n=1")
                ctx.write("out", [row])

    stage = Stage("things", "1", None, {}, {"out": Output("things", "kept"), "audit": Output("things", "every judged item", counted=False, audit=True)},
                  {"late": Param(bool, False, "write t1's row before rejecting it")}, run=run, rejects={"too_big": "n is above the limit"})
    out, audit = tmp_path / "o" / "things.parquet", tmp_path / "o" / "audit.parquet"
    stage.main([f"--output=out={out}", f"--output=audit={audit}"])
    assert [r["id"] for r in pq.read_table(out).to_pylist()] == ["t0", "t2"]
    assert [r["id"] for r in pq.read_table(audit).to_pylist()] == ["t0", "t1", "t2"]
    assert [r["id"] for r in pq.read_table(f"{out}.rejects.parquet").to_pylist()] == ["t1"]

    out, audit = tmp_path / "late" / "things.parquet", tmp_path / "late" / "audit.parquet"
    with pytest.raises(SystemExit, match=r"things: error: internal error: item 't1' was rejected \(too_big\) after rows were written for it to \['out'\]"):
        stage.main([f"--output=out={out}", f"--output=audit={audit}", "--param", "late=true"])
    assert list(out.parent.iterdir()) == []


def test_a_report_sidecar_is_read_field_by_field(tmp_path):
    """Report stages read other stages' sidecars from disk: each field is kept only when it is of
    its type, so a hand-edited or broken sidecar shows as blanks, never as a crash or a wrong count."""
    from stages.core.stage import read_report

    out = tmp_path / "responses.parquet"
    assert read_report(out) == {}  # none written
    for broken in ("{not json", "[1, 2]", "\x00"):
        Path(f"{out}.report.json").write_text(broken)
        assert read_report(out) == {}
    Path(f"{out}.report.json").write_text(json.dumps({
        "stage": "generate_answers", "rows_in": True, "rejected": 3, "params": {"model": "m"}, "rows_out": {"responses": 4, "odd": "4"},
        "rejected_by_reason": [["invalid_answer", 3]], "stats": {"llm_calls": 7, "nan": float("nan"), "huge": 1e300, "below": -1}}))
    assert read_report(out) == {"stage": "generate_answers", "rejected": 3, "params": {"model": "m"}, "rows_out": {"responses": 4},
                                "stats": {"llm_calls": 7}}


def test_folder_params_are_checked_before_the_work(tmp_path, schema_dir):
    """A folder the stage writes into is made and must take a file; one it reads must be a folder
    where it exists; an empty value (a disabled cache) is not checked."""
    ran = []
    stage = Stage("stored", "1", None, {}, {"out": Output("things", "kept")},
                  {"store": Param(str, "", folder="writes"), "source": Param(str, "", folder="reads")}, run=lambda ctx: ran.append(1))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")

    def fails(**params) -> str:
        with pytest.raises(SystemExit) as exc:
            stage.main(["--output", f"out={tmp_path / 'out' / 't.parquet'}", "--params", json.dumps(params)])
        return str(exc.value)

    assert fails(store=f"{a_file}/x") == f"stored: error: param 'store': cannot write into '{a_file}/x': Not a directory"
    assert fails(source=str(a_file)) == f"stored: error: param 'source': {a_file} is not a folder"
    assert fails(source=f"{a_file}/x") == f"stored: error: param 'source': cannot read '{a_file}/x': Not a directory"
    assert fails(store="a\x00b") == "stored: error: param 'store': cannot write into 'a\\x00b': embedded null byte"
    assert not ran
    stage.main(["--output", f"out={tmp_path / 'out' / 't.parquet'}", f"--param=store={tmp_path / 'new' / 'store'}",
                f"--param=source={tmp_path / 'not_filled_yet'}"])
    stage.main(["--output", f"out={tmp_path / 'out' / 't.parquet'}"])  # both empty: not checked
    assert ran == [1, 1] and (tmp_path / "new" / "store").is_dir() and not (tmp_path / "not_filled_yet").exists()


def test_a_float_written_by_json_dumps_reads_as_a_float(tmp_path, schema_dir):
    """The rules pass params as json.dumps writes them: 1e-05, 1e+16. YAML 1.1 reads those as
    strings, so the params are read as JSON first (and --param values too)."""
    seen = []
    stage = Stage("floats", "1", None, {}, {"out": Output("things", "kept")},
                  {"rate": Param(float, 0.5), "big": Param(float, 1.0), "name": Param(str, "")}, run=lambda ctx: seen.append(ctx.params))
    out = f"out={tmp_path / 't.parquet'}"
    stage.main(["--output", out, "--params", json.dumps({"rate": 0.00001, "big": 1e16, "name": "1e-05"})])
    stage.main(["--output", out, "--param", "rate=1e-5", "--param", "big=2.5", "--param", "name=plain words"])
    assert seen == [{"rate": 1e-05, "big": 1e16, "name": "1e-05"}, {"rate": 1e-05, "big": 2.5, "name": "plain words"}]
