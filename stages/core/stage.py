"""The stage contract (docs/ARCHITECTURE.md "The stage contract"): one tiny interface, one CLI runner.

A stage module declares itself and ends with `STAGE.main()`:

    STAGE = Stage(
        name="filter_questions",
        version="1",
        doc=__doc__,
        inputs={"posts": Input("kept image posts", many=True)},
        outputs={"questions": Output("reddit_questions")},
        params={"min_answer_chars": Param(int, 500, "answer must be longer than this")},
        rejects={"empty_title": "the post has no title"},
        run=run,
    )

and runs alone:

    python -m stages.mavis.filter_questions --input posts=a.parquet --output questions=b.parquet \
        --params params.yaml          # or inline JSON: --params '{"min_answer_chars": 400}'

Before `run(ctx)`, every file of every table input is checked against the input's declared
table schema (`Input(..., table=...)`). `ctx.read`/`ctx.read_rows` return the rows that keep the
table's contract (key, nullable columns, values, ranges: stages/core/tables.py); the runner
rejects the others with CONTRACT_REJECTS before the stage sees them, and the report counts them
in rows in and rejected. `run(ctx)` reads inputs with `ctx.read`/`ctx.read_rows`,
writes rows through `ctx.writer(name)`/`ctx.write(name, rows)`, and handles each input item in its
scope, where raising `Reject(reason, detail)` drops it:

    for row in ctx.read_rows("posts"):
        with ctx.item(row["id"]):          # counts the item as read
            if not row["title"]:
                raise Reject("empty_title", f"post {row['id']} has no title")
            ctx.write("questions", [...])

`rejects` declares every reason the stage can reject with, each with a one-line meaning (`--help`,
the catalog's `reject_reasons` and the release cards print them); rejecting with a reason not
declared fails the stage. A model stage declares the prompts it renders (`prompts=("name",)`, files
prompts/<name>.md); rendering another fails too. schemas/stages.yaml holds every declaration
(stages/core/declarations.py).

The runner checks the count invariant (rows in = rows out + rejected, over the outputs marked
`counted`), then commits every output, the rejects sidecar `<first output>.rejects.parquet` and
`<first output>.report.json` together: all or none. A violation, an exception or a kill leaves
no output behind; the next successful run sweeps the temp files a kill left.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import stat
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from .declarations import declared_meaning
from .errors import StageError
from .layout import PLAIN_NAME, LayoutError, stage_module
from .tables import (CONTRACT_REJECTS, REJECTS_CONTRACT, REJECTS_SCHEMA, SchemaError, TableWriter, check_columns, commit_together, contract_problems, first_of_repeats,
                     read_batches, read_tables, row_key, stage_bytes, sweep_stale_temps, table_contract, table_schema)

log = logging.getLogger("citeforge")

REQUIRED = object()
_RUNNING: list["Stage"] = []  # the stage whose `run` this process is in (prompts.py checks its prompts)


_JSON_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}
_BOUND_KEYS = {  # what min/max bound: a number's value, a list's items, a dict's keys, a string's length
    int: {"min": "minimum", "max": "maximum"},
    float: {"min": "minimum", "max": "maximum"},
    list: {"min": "minItems", "max": "maxItems"},
    dict: {"min": "minProperties", "max": "maxProperties"},
    str: {"min": "minLength", "max": "maxLength"},
}


@dataclass(frozen=True)
class Param:
    """One setting of a stage, and the single source of its config schema: the config section that
    feeds a stage is generated from these declarations (stages/core/config_schema.py), and the CLI
    checks `--params` against the same schema, so the two cannot disagree.

    `choices` lists the allowed values; `min`/`max` bound a number (inclusive), or the length of a
    list, dict or string; `above` is an exclusive lower bound (a timeout must be above 0);
    `pattern` is a regex a string must match (anchor it; `Param.PLAIN_NAME` for a name that becomes
    a folder). `items` types a list's elements or a dict's values (a type or a Param);
    `fields` makes a dict a record with these keys (required where the Param has no default).
    `schema` names a run-wide section schema (`llm`, `fetch`: schemas/config/<schema>.schema.yaml)
    that a dict param is checked against. A default of None makes the param nullable.
    `folder` marks a path param naming a folder the stage "writes" into (created, and it must take
    a file) or "reads" (a store another stage fills: a folder if it is there); the runner checks it
    before the work, so a wrong path is one line, not a traceback mid-run or every item rejected.
    An empty value (a disabled cache) is not checked.
    """

    PLAIN_NAME: ClassVar[str] = PLAIN_NAME  # a pattern for names that become a folder

    type: type
    default: Any = REQUIRED
    help: str = ""
    choices: tuple | None = None
    min: float | None = None
    max: float | None = None
    above: float | None = None
    pattern: str | None = None
    items: "type | Param | None" = None
    fields: "dict[str, Param] | None" = None
    schema: str | None = None
    folder: str | None = None  # "writes" | "reads"

    def __post_init__(self):
        if self.folder not in (None, "writes", "reads"):
            raise ValueError(f"Param folder must be 'writes' or 'reads', got {self.folder!r}")

    def json_schema(self, with_default: bool = True) -> dict:
        """This param as JSON Schema (draft 2020-12), `help` as its description."""
        if self.schema:
            out: dict[str, Any] = {"$ref": f"{self.schema}.schema.yaml"}
        else:
            kind = _JSON_TYPES[self.type]
            out = {"type": [kind, "null"] if self.default is None else kind}
        if self.choices is not None:
            out["enum"] = [*self.choices, *([None] if self.default is None else [])]
        for bound, side in ((self.min, "min"), (self.max, "max")):
            if bound is not None:
                out[_BOUND_KEYS[self.type][side]] = bound
        if self.above is not None:
            out["exclusiveMinimum"] = self.above
        if self.pattern is not None:
            out["pattern"] = self.pattern
        if self.items is not None:
            item = self.items.json_schema(with_default=False) if isinstance(self.items, Param) else Param(self.items).json_schema()
            out["items" if self.type is list else "additionalProperties"] = item
        if self.fields is not None:
            out["additionalProperties"] = False
            out["properties"] = {name: spec.json_schema() for name, spec in self.fields.items()}
            required = [name for name, spec in self.fields.items() if spec.default is REQUIRED]
            if required:
                out["required"] = required
        if self.help:
            out["description"] = self.help
        if with_default and self.default is not REQUIRED and not self.schema:
            out["default"] = self.default
        return out

    def bounds(self) -> str:
        """The constraints in a few words for --help, e.g. ' (>= 1)', ' (one of: auto, cpu, cuda)'."""
        words = []
        if self.choices is not None:
            words.append("one of: " + ", ".join(map(str, self.choices)))
        if self.min is not None:
            words.append(f">= {self.min}" if self.type in (int, float) else f"at least {self.min}")
        if self.above is not None:
            words.append(f"> {self.above}")
        if self.max is not None:
            words.append(f"<= {self.max}" if self.type in (int, float) else f"at most {self.max}")
        if self.items is not None:
            item = self.items.type if isinstance(self.items, Param) else self.items
            words.append(f"of {item.__name__}")
        if self.fields is not None:
            words.append("keys: " + ", ".join(self.fields))
        if self.schema:
            words.append(f"schemas/config/{self.schema}.schema.yaml")
        if self.folder:
            words.append(f"a folder it {self.folder[:-1]}s")
        return f" ({'; '.join(words)})" if words else ""

    def check(self, name: str, value: Any) -> Any:
        """The value if it fits this param (an int where a float is due becomes a float), else a
        StageError naming the param, the offending entry and what was expected."""
        from .schema_check import schema_errors  # jsonschema is only needed when params are checked

        for where, problem, _ in schema_errors(self.json_schema(with_default=False), value):
            raise StageError(f"param {name + where!r} {problem}")
        if self.type is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value


@dataclass(frozen=True)
class Input:
    help: str
    many: bool = False  # several paths (shards) read as one table
    optional: bool = False
    kind: str = "table"  # table | file | dir
    table: str | None = None  # schema in schemas/tables that `ctx.read` checks every file against
    # Params naming further columns the input must hold, for stages that read a table of the
    # caller's choosing (cache_images' url column, filter_images' text column).
    column_params: tuple[str, ...] = ()


@dataclass(frozen=True)
class Output:
    table: str | None  # schema name in schemas/tables; None for a non-table file or folder
    help: str = ""
    counted: bool = True  # part of "rows out" in the count invariant
    many: bool = False  # several paths, e.g. one per shard
    audit: bool = False  # a row for every item judged, rejected ones included (a judge's scores): not an item's output


class Reject(Exception):
    """Raised inside `with ctx.item(id):` to drop that one item: the runner records the reject
    (reason code, detail) and the stage goes on with the next item. The one way to reject."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Stage:
    name: str
    version: str
    doc: str | None
    inputs: dict[str, Input]
    outputs: dict[str, Output]
    params: dict[str, Param]
    run: Callable[["Context"], None]
    # Fan-out stages state their own invariant: a function of the finished context that returns
    # an error message, or None when the counts add up.
    invariant: Callable[["Context"], str | None] | None = None
    # reason -> one-line meaning, for every reason the stage can reject with (a `<placeholder>` in
    # a reason stands for digits: `http_<status>`); rejecting with any other fails the stage
    rejects: dict[str, str] = field(default_factory=dict)
    prompts: tuple[str, ...] = ()  # the prompts/<name>.md the stage renders; rendering another fails

    def main(self, argv: list[str] | None = None) -> None:
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {self.name} %(levelname)s %(message)s")
        try:
            args = self._parser().parse_args(argv)
            ctx = Context.from_args(self, args)
            report = ctx.execute()
        except StageError as err:  # one line, on stderr (which Snakemake sends to the job's log)
            sys.exit(f"{self.name}: error: {err}")
        log.info("done: %s", _summary(report))

    def _prog(self) -> str:
        try:
            return f"python -m {stage_module(self.name)}"
        except LayoutError:  # a stage declared outside stages/<group>/ (tests, notebooks)
            return self.name

    def _example(self) -> list[str]:
        """A command line giving what the stage cannot run without, one flag a line."""
        path = lambda name, table: f"{name}.parquet" if table else name.upper()  # noqa: E731
        return ([self._prog()]
                + [f"--input {name}={path(name, spec.kind == 'table')}" for name, spec in self.inputs.items() if not spec.optional]
                + [f"--output {name}={path(name, spec.table)}" for name, spec in self.outputs.items()]
                + [f"--param {name}=VALUE" for name, spec in self.params.items() if spec.default is REQUIRED])

    def _parser(self) -> argparse.ArgumentParser:
        lines = [f"stage {self.name} (version {self.version})", "", "inputs:"]
        for name, spec in self.inputs.items():
            extra = ", several paths" if spec.many else ""
            extra += ", optional" if spec.optional else ""
            lines.append(f"  {name:<22} {spec.kind}{extra}: {spec.help}")
        lines.append("outputs:")
        for name, spec in self.outputs.items():
            what = f"table {spec.table}" if spec.table else "file"
            lines.append(f"  {name:<22} {what}{', several paths' if spec.many else ''}: {spec.help}")
        lines.append("params (default in brackets):")
        for name, spec in self.params.items():
            default = "required" if spec.default is REQUIRED else json.dumps(spec.default)
            if spec.schema and spec.default == {}:  # a run-wide section: its keys have defaults of their own
                default += ": each key at the schema's default"
            lines.append(f"  {name:<22} {spec.type.__name__}{spec.bounds()} [{default}]: {spec.help}")
        lines.append("reject reasons:" if self.rejects else "reject reasons: none")
        lines += [f"  {reason:<22} {meaning}" for reason, meaning in self.rejects.items()]
        if self.prompts:
            lines.append("prompts (prompts/<name>.md): " + ", ".join(self.prompts))
        lines += ["", "Sidecars next to the first output: <output>.rejects.parquet, <output>.report.json.",
                  "", "example (what the stage cannot run without; `snakemake -n -p --forceall release` prints every job's own command):",
                  "  " + " \\\n      ".join(self._example())]
        parser = argparse.ArgumentParser(
            prog=self._prog(),
            description=textwrap.dedent(self.doc or "").strip(),
            epilog="\n".join(lines),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--input", action="append", default=[], metavar="NAME=PATH", help="an input; repeat NAME for several paths")
        parser.add_argument("--output", action="append", default=[], metavar="NAME=PATH", help="an output; repeat NAME for several paths")
        parser.add_argument("--params", metavar="FILE|JSON", help="YAML/JSON file of params, or inline JSON")
        parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="one param (YAML value; KEY= is the empty string), overrides --params")
        return parser


def _pairs(items: list[str], what: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = collections.defaultdict(list)
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise StageError(f"--{what} expects NAME=PATH, got {item!r}")
        out[name].append(path)
    return dict(out)


def load_params(stage: Stage, params_arg: str | None, overrides: list[str]) -> dict[str, Any]:
    given: dict[str, Any] = {}
    if params_arg:
        text = params_arg if params_arg.lstrip().startswith(("{", "[")) else _read_text(params_arg, "params file")
        try:
            loaded = _json_or_yaml(text) or {}
        except yaml.YAMLError as err:
            where = "inline JSON" if text is params_arg else params_arg
            mark = getattr(err, "problem_mark", None)
            at = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
            raise StageError(f"--params: {where} is not valid JSON/YAML: {getattr(err, 'problem', None) or err}{at}") from None
        if not isinstance(loaded, dict):
            raise StageError(f"--params must be a mapping, got {type(loaded).__name__}")
        given.update(loaded)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise StageError(f"--param expects KEY=VALUE, got {item!r}")
        try:
            given[key] = _json_or_yaml(value) if value else ""  # KEY= is the empty string (YAML would read null)
        except yaml.YAMLError as err:
            raise StageError(f"--param {key}: {value!r} is not a valid YAML value ({getattr(err, 'problem', None) or err})") from None
    unknown = sorted(set(given) - set(stage.params))
    if unknown:
        raise StageError(f"unknown param(s) {unknown}; {stage.name} takes {sorted(stage.params)}")
    params = {}
    for name, spec in stage.params.items():
        if name in given:
            params[name] = spec.check(name, given[name])
        elif spec.default is REQUIRED:
            raise StageError(f"param {name!r} is required: {spec.help}")
        else:
            params[name] = spec.default
    return params


def _json_or_yaml(text: str) -> Any:
    """JSON when the text is JSON (what the rules pass), else YAML: YAML 1.1 reads JSON's 1e-05 or
    1e+16 as a string, so a float param written by json.dumps would fail its check."""
    try:
        return json.loads(text)
    except ValueError:
        return yaml.safe_load(text)


def probe_folder(folder: Path, name: str) -> None:
    """Make the folder and write and remove a file in it: raises OSError when it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
    os.close(fd)
    os.unlink(probe)


def _read_text(path: str, what: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as err:
        raise StageError(f"cannot read {what} {path}: {err}") from None


class Context:
    """What a stage's `run` sees: params, input paths, output writers, rejects and counters."""

    def __init__(self, stage: Stage, inputs: dict[str, list[str]], outputs: dict[str, list[str]], params: dict[str, Any]):
        self.stage = stage
        self.params = params
        self._inputs = inputs
        self._outputs = outputs
        self._writers: dict[tuple[str, int], TableWriter] = {}
        self._rejects: TableWriter | None = None  # streamed: a harvest may reject millions of rows
        self.rejected_by_reason: collections.Counter[str] = collections.Counter()
        self.rows_in = 0
        # Input rows the runner rejected for breaking their table's contract (CONTRACT_REJECTS):
        # the stage never sees them, so its own counts (rows_in, rejected_by_reason, the
        # invariant) leave them out; the report adds them to rows in and rejected.
        self.contract_rejected: collections.Counter[tuple[str, str]] = collections.Counter()  # (input, reason) -> rows
        self._read_cache: dict[str, pa.Table] = {}
        self._file_rows: collections.Counter[str] = collections.Counter()  # rows a file output holds
        self.stats: collections.Counter[str] = collections.Counter()  # extra figures for the report
        self.started_at = time.time()  # temps of our outputs older than this are a killed run's
        self._check_names()
        self._check_writable()
        self._check_folders()

    @classmethod
    def from_args(cls, stage: Stage, args: argparse.Namespace) -> "Context":
        return cls(stage, _pairs(args.input, "input"), _pairs(args.output, "output"), load_params(stage, args.params, args.param))

    def _check_names(self) -> None:
        for kind, given, declared in (("input", self._inputs, self.stage.inputs), ("output", self._outputs, self.stage.outputs)):
            unknown = sorted(set(given) - set(declared))
            if unknown:
                raise StageError(f"unknown {kind}(s) {unknown}; {self.stage.name} takes {sorted(declared)}")
            for name, spec in declared.items():
                paths = given.get(name, [])
                if not paths and not (kind == "input" and spec.optional):
                    raise StageError(f"missing --{kind} {name}=PATH ({spec.help})")
                if len(paths) > 1 and not spec.many:
                    raise StageError(f"{kind} {name!r} takes one path, got {len(paths)}")
        for name, paths in self._inputs.items():
            for path in paths:
                if not Path(path).exists():
                    raise StageError(f"input {name!r}: {path} does not exist")

    def _check_writable(self) -> None:
        """Each output's folder can take a file: fail before the work, with one line, not after."""
        for name, paths in self._outputs.items():
            for path in paths:
                try:
                    probe_folder(Path(path).parent, Path(path).name)
                except OSError as err:
                    raise StageError(f"output {name!r}: cannot write {path}: {err.strerror or err}") from None

    def _check_folders(self) -> None:
        """The folder params (Param.folder): one written into is made and takes a file, one read is
        a folder where it exists (a store not filled yet is not there)."""
        for name, spec in self.stage.params.items():
            path = self.params.get(name)
            if spec.folder is None or not path:
                continue
            try:
                if spec.folder == "writes":
                    probe_folder(Path(path), "probe")
                elif not stat.S_ISDIR(os.stat(path).st_mode):
                    raise StageError(f"param {name!r}: {path} is not a folder")
            except FileNotFoundError:
                if spec.folder == "writes":
                    raise StageError(f"param {name!r}: cannot make the folder {path}") from None
            except (OSError, ValueError) as err:  # not a folder on the way, no permission, a NUL in the path
                raise StageError(f"param {name!r}: cannot {'write into' if spec.folder == 'writes' else 'read'} {path!r}: "
                                 f"{getattr(err, 'strerror', None) or err}") from None

    # inputs -------------------------------------------------------------------------------
    def has_input(self, name: str) -> bool:
        return bool(self._inputs.get(name))

    def input_paths(self, name: str) -> list[str]:
        return list(self._inputs.get(name, []))

    def input_path(self, name: str) -> str:
        return self._inputs[name][0]

    def read(self, name: str) -> pa.Table:
        """The input's files as one table of the rows that keep their table's contract (the
        columns cast to the declared types, checked by `check_inputs` before `run`), or an empty
        table of its schema when an optional input has none. The first read rejects the other
        rows (CONTRACT_REJECTS, each naming the column); later reads return the same table."""
        if name not in self._read_cache:
            self._read_cache[name] = self._read_checked(name)
        return self._read_cache[name]

    def count_rows(self, name: str, by: list[str]) -> pa.Table:
        """How many rows of input `name` keep its table's contract, per file and per value of the
        `by` columns (columns `file`, *by, `rows`), read a batch at a time: a harvest's rejects may
        be hundreds of millions of rows, more than `read` holds. The other rows are rejected as
        `read` rejects them. For a table whose contract needs no other row than the one checked
        (no key, no whole-row repeats)."""
        spec = self.stage.inputs[name]
        schema, contract = table_schema(spec.table), table_contract(spec.table)
        if contract.key or contract.same_row_repeats:
            raise ValueError(f"count_rows reads input {name!r} a batch at a time: table {spec.table!r} has a key or whole-row repeats")
        parts = []
        for path in self.input_paths(name):
            done = 0
            for batch in self._batches(name, path, schema, spec.table):
                size, problems = batch.num_rows, contract_problems(batch, contract)
                if problems:
                    self._reject_broken(name, batch, contract, problems, lambda row: f"{Path(path).name} row {done + row}")
                    keep = np.ones(batch.num_rows, dtype=bool)
                    keep[[row for row, _, _ in problems]] = False
                    batch = batch.filter(pa.array(keep))
                counts = batch.group_by(by).aggregate([([], "count_all")])
                parts.append(counts.append_column("file", pa.repeat(pa.scalar(path), counts.num_rows)))
                done += size
        empty = pa.table({"file": pa.array([], pa.string()), **{c: pa.array([], schema.field(c).type) for c in by},
                          "rows": pa.array([], pa.int64())})
        if not parts:
            return empty
        summed = pa.concat_tables(parts).group_by(["file", *by]).aggregate([("count_all", "sum")])
        return pa.table({"file": summed["file"], **{c: summed[c] for c in by}, "rows": summed["count_all_sum"]}).sort_by([("file", "ascending")])

    @staticmethod
    def _batches(name: str, path: str, schema: pa.Schema, table: str):
        try:
            yield from read_batches(path, schema, table)
        except SchemaError as err:  # a value that does not convert: one line, as `read` says it
            raise StageError(f"input {name!r}: {err}") from None

    def _read_checked(self, name: str) -> pa.Table:
        spec = self.stage.inputs[name]
        paths = self._inputs.get(name)
        if not paths:
            return (table_schema(spec.table) if spec.table else pa.schema([])).empty_table()
        try:
            table = read_tables(paths, table_schema(spec.table) if spec.table else None, spec.table or name)
        except SchemaError as err:
            raise StageError(f"input {name!r}: {err}") from None
        if not spec.table:  # the caller's table: its columns are the stage's to check
            return table
        contract = table_contract(spec.table)
        read_rows = None  # each row's number in the files as read, when whole-row repeats were dropped
        if contract.same_row_repeats and table.num_rows:
            read_rows = first_of_repeats(table, contract.key)
            if read_rows is not None and len(read_rows) < table.num_rows:
                self.stats[f"{name}_repeated_rows"] = table.num_rows - len(read_rows)
                table = table.take(pa.array(read_rows))
        problems = contract_problems(table, contract)
        if not problems:
            return table
        ends = np.cumsum([pq.ParquetFile(path).metadata.num_rows for path in paths])  # where each file's rows end

        def where(row: int) -> str:
            in_files = int(read_rows[row]) if read_rows is not None else row
            at = int(np.searchsorted(ends, in_files, side="right"))
            return f"{Path(paths[at]).name} row {in_files - (ends[at - 1] if at else 0)}"

        self._reject_broken(name, table, contract, problems, where)
        keep = np.ones(table.num_rows, dtype=bool)
        keep[[row for row, _, _ in problems]] = False
        return table.filter(pa.array(keep))

    def _reject_broken(self, name: str, table: pa.Table, contract, problems: list[tuple[int, str, str]], where) -> None:
        """Reject the rows of input `name` that break its table's contract (`problems`, from
        contract_problems), each named by its key or by `where(row)`, its file and row."""
        ids, reasons, details = [], [], []
        for row, reason, detail in problems:
            at = where(row)
            ids.append(row_key(table, contract, row) or at)
            reasons.append(reason)
            details.append(f"{detail} (input {name!r}, {at})")
            self.contract_rejected[name, reason] += 1
        self._write_rejects(ids, reasons, details)

    def check_inputs(self) -> None:
        """Every file of every table input holds its declared table's columns with their types,
        and the columns its `column_params` name; read from the footers, before the stage reads
        anything, whatever it reads with. A mismatch fails naming the file, the table, the column."""
        for name, spec in self.stage.inputs.items():
            if spec.kind != "table":
                continue
            schema = table_schema(spec.table) if spec.table else pa.schema([])
            named = [self.params[p] for p in spec.column_params if self.params[p]]
            for path in self._inputs.get(name, []):
                try:
                    check_columns(path, schema, spec.table or name, named)
                except SchemaError as err:
                    raise StageError(f"input {name!r}: {err}") from None

    def read_rows(self, name: str) -> list[dict]:
        return self.read(name).to_pylist()

    def add_input(self, n: int = 1) -> None:
        self.rows_in += n

    @contextlib.contextmanager
    def item(self, item_id: str, counted: bool = True):
        """One input item's scope: counts it as read (unless `counted` is False, for items the
        stage already counted) and turns a `Reject` raised inside into a recorded reject. An item
        is kept or rejected, never both: a stage that wrote rows for an item (to an output other
        than an audit one) and then rejects it has a bug (its output would hold rows of an item the
        card counts as rejected), and stops."""
        if counted:
            self.rows_in += 1
        taken = {key: writer.rows_taken for key, writer in self._writers.items()}
        try:
            yield
        except Reject as rejected:
            wrote = [name for (name, index), writer in self._writers.items()
                     if writer.rows_taken > taken.get((name, index), 0) and not self.stage.outputs[name].audit]
            if wrote:
                raise StageError(f"internal error: item {item_id!r} was rejected ({rejected.reason}) after rows were written for it "
                                 f"to {sorted(set(wrote))}") from None
            self.reject(item_id, rejected.reason, rejected.detail)

    # outputs ------------------------------------------------------------------------------
    def output_paths(self, name: str) -> list[str]:
        return list(self._outputs[name])

    def output_path(self, name: str) -> str:
        return self._outputs[name][0]

    def writer(self, name: str, index: int = 0) -> TableWriter:
        key = (name, index)
        if key not in self._writers:
            table = self.stage.outputs[name].table
            if table is None:
                raise StageError(f"output {name!r} is a file, not a table: write it at ctx.output_path({name!r})")
            self._writers[key] = TableWriter(self._outputs[name][index], table_schema(table), table)
        return self._writers[key]

    def write(self, name: str, rows: list[dict] | pa.Table, index: int = 0) -> None:
        self.writer(name, index).write_many(rows)

    def _check_reason(self, reason: str) -> None:
        """A reason the stage declared, or one of the runner's own (a broken table contract)."""
        if reason not in CONTRACT_REJECTS and declared_meaning(self.stage.rejects, reason) is None:
            raise StageError(f"stage {self.stage.name} rejected an item with undeclared reason {reason!r}; declare it in STAGE.rejects")

    def _rejects_writer(self) -> TableWriter:
        if self._rejects is None:
            self._rejects = TableWriter(f"{self.sidecar_base}.rejects.parquet", REJECTS_SCHEMA, "rejects", contract=REJECTS_CONTRACT)
        return self._rejects

    def reject(self, item_id: str, reason: str, detail: str = "") -> None:
        self._check_reason(reason)
        self._rejects_writer().write({"id": item_id, "stage": self.stage.name, "reason": reason, "detail": detail[:2000]})
        self.rejected_by_reason[reason] += 1

    def reject_many(self, ids, reasons, details) -> None:
        """Rejects judged in bulk (a harvest's millions of lines), the same rows as one `reject`
        per item, written as one Arrow batch: per-row calls cost more than the judging. Each
        column is a list of strings or an Arrow string array."""
        reasons = self._write_rejects(ids, reasons, details)
        if reasons is not None:
            for counted in pc.value_counts(reasons).to_pylist():
                self.rejected_by_reason[counted["values"]] += counted["counts"]

    def _write_rejects(self, ids, reasons, details) -> pa.Array | None:
        """Write reject rows in one Arrow batch; returns the reasons as an Arrow array (None when empty)."""
        if not len(ids):
            return None
        ids, reasons, details = (pa.array(column, pa.string()) for column in (ids, reasons, details))
        counts = pc.value_counts(reasons).to_pylist()  # the distinct reasons: checked once each, not per row
        for counted in counts:
            self._check_reason(counted["values"])
        columns = [ids, pa.repeat(pa.scalar(self.stage.name), len(ids)), reasons, pc.utf8_slice_codeunits(details, 0, 2000)]
        self._rejects_writer().write_many(pa.Table.from_arrays(columns, schema=REJECTS_SCHEMA))
        return reasons

    @property
    def rejected(self) -> int:
        return sum(self.rejected_by_reason.values())

    def count_output(self, name: str, rows: int) -> None:
        """Rows a non-table output holds (a release, a catalog), so the count invariant covers it."""
        self._file_rows[name] += rows

    def rows_out(self, name: str) -> int:
        written = sum(w.rows_taken for (n, _), w in self._writers.items() if n == name)
        return written + self._file_rows[name]

    def check_invariant(self) -> None:
        """Raise now if the counts do not add up: for stages that publish outside the runner's
        atomic commit (a release folder) and must check before they do."""
        problem = self._invariant_problem()
        if problem:
            raise StageError(f"count invariant broken: {problem}")

    # running ------------------------------------------------------------------------------
    @property
    def sidecar_base(self) -> Path:
        first = next(iter(self.stage.outputs))
        return Path(self._outputs[first][0])

    def execute(self) -> dict:
        """Run the stage, then commit every output, the rejects sidecar and the report together
        (all or none), then sweep the temps a killed earlier run left beside them."""
        started = time.monotonic()
        self.check_inputs()
        staged = []
        try:
            _RUNNING.append(self.stage)
            try:
                self.stage.run(self)
                for name, spec in self.stage.outputs.items():  # every declared table exists, even if empty
                    if spec.table is not None:
                        for index in range(len(self._outputs[name])):
                            self.writer(name, index)
                finished = [writer.finish() for writer in self._writers.values()]
            except SchemaError as err:  # a row the stage's own output contract forbids: a bug, told in one line
                raise StageError(f"cannot write: {err}") from None
            finally:
                _RUNNING.pop()
            self.check_invariant()
            for name, spec in self.stage.outputs.items():
                if spec.table is None:
                    for path in self._outputs[name]:
                        if not Path(path).exists():
                            raise StageError(f"output {name!r} was not written at {path}")
            report = self._report(started)
            staged = [*finished, self._rejects_writer().finish()]  # an empty sidecar still documents "nothing rejected"
            staged.append((stage_bytes(f"{self.sidecar_base}.report.json", json.dumps(report, indent=2, default=str).encode()),
                           Path(f"{self.sidecar_base}.report.json")))
            try:
                commit_together(staged)
            except OSError as err:
                raise StageError(f"cannot commit the outputs, none was: {err}") from None
        except BaseException:
            for writer in [*self._writers.values(), self._rejects]:
                if writer is not None:
                    writer.abort()
            for tmp, _ in staged:
                tmp.unlink(missing_ok=True)
            raise
        for writer in [*self._writers.values(), self._rejects]:
            writer.release()
        sweep_stale_temps(self._targets(), before=self.started_at)
        return report

    def _targets(self) -> list[Path]:
        base = self.sidecar_base
        paths = [Path(p) for paths in self._outputs.values() for p in paths]
        return paths + [Path(f"{base}.rejects.parquet"), Path(f"{base}.report.json")]

    def _report(self, started: float) -> dict:
        on_read = sum(self.contract_rejected.values())
        by_reason = self.rejected_by_reason.copy()
        by_input: collections.Counter[str] = collections.Counter()
        for (name, reason), n in self.contract_rejected.items():
            by_reason[reason] += n
            by_input[name] += n
        return {
            "stage": self.stage.name,
            "version": self.stage.version,
            "params": self.params,
            "rows_in": self.rows_in + on_read,
            "rows_out": {name: self.rows_out(name) for name, spec in self.stage.outputs.items() if spec.table or self._file_rows[name]},
            "rejected": self.rejected + on_read,
            "rejected_by_reason": dict(sorted(by_reason.items())),
            "rejected_on_read": dict(sorted(by_input.items())),  # input rows that broke their table's contract, by input
            "stats": dict(sorted(self.stats.items())),
            "seconds": round(time.monotonic() - started, 3),
        }

    def _invariant_problem(self) -> str | None:
        if self.stage.invariant is not None:
            return self.stage.invariant(self)
        out = sum(self.rows_out(n) for n, spec in self.stage.outputs.items() if spec.counted)
        if self.rows_in != out + self.rejected:
            return f"rows in {self.rows_in} != rows out {out} + rejected {self.rejected}"
        return None


def is_count(value, kinds: tuple[type, ...] = (int, float)) -> bool:
    """A count (or seconds) as a stage's report writes it: a number >= 0 that a BIGINT holds, not
    a bool; NaN and infinity fail the comparison. The readers of other stages' sidecars check with it."""
    return type(value) in kinds and 0 <= value < 2**63


def read_report(output: str | os.PathLike) -> dict:
    """The report sidecar the runner wrote beside an output (`<output>.report.json`), for a stage
    that reports on another's run: only the fields of their type are kept (counts: ints >= 0 that
    a BIGINT holds; rows_out, rejected_by_reason and stats: name -> such a number; params: an
    object; stage: a string), {} when there is none or it is not JSON. A report stage then shows a
    blank, never a wrong number or a crash."""
    side = Path(f"{output}.report.json")
    try:
        report = json.loads(side.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        log.warning("%s is not a stage report (%s); read as none", side, err)
        return {}
    if not isinstance(report, dict):
        return {}

    kept: dict[str, Any] = {k: report[k] for k in ("rows_in", "rejected") if is_count(report.get(k), (int,))}
    kept |= {k: {n: v for n, v in report[k].items() if is_count(v)} for k in ("rows_out", "rejected_by_reason", "stats")
             if isinstance(report.get(k), dict)}
    kept |= {k: report[k] for k, kind in (("params", dict), ("stage", str)) if isinstance(report.get(k), kind)}
    return kept


def running_stage() -> Stage | None:
    """The stage whose `run` is executing in this process, if any."""
    return _RUNNING[-1] if _RUNNING else None


def _summary(report: dict) -> str:
    outs = ", ".join(f"{k}={v}" for k, v in report["rows_out"].items())
    return f"in={report['rows_in']} out[{outs}] rejected={report['rejected']} {report['seconds']}s"
