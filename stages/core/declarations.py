"""The stage manifest: every stage's declaration (`STAGE = Stage(...)`) as data, in schemas/stages.yaml.

Snakemake must not import stage modules at DAG-parse time (torch, duckdb, pyarrow...), yet rules,
the catalog and the release cards read what the stages declare. So the declarations are written
out once, one entry per stage, sorted by name:

    filter_questions:
      module: stages.mavis.filter_questions
      family: mavis                  # the stages/<group> folder
      version: '1'
      inputs:
        posts: {kind: table, table: reddit_posts, many: true, optional: false}
      outputs:                       # in declaration order: the first holds the sidecars
        questions: {table: reddit_questions, many: false, counted: true}
      params:                        # default omitted when the param is required;
        min_answer_chars: {type: int, default: 500}   # schema: the run-wide section a dict param follows
      prompts: []                    # prompts/<name>.md the stage renders
      rejects:                       # every reject reason the stage can emit, with its meaning
        title_not_question_word: the title does not start with a question word

`python -m stages.core.declarations --write` regenerates the file from the stage modules;
`--check` exits non-zero naming the stages whose entry is stale (the test suite runs the same
comparison). `load_manifest()` reads the committed file and imports no stage.

A declared reject reason is a plain code, or a pattern whose `<placeholder>` stands for digits:
`http_<status>` covers the fetch layer's http_404, http_503... (`declared_meaning`).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
STAGES_DIR = ROOT / "stages"
MANIFEST = ROOT / "schemas" / "stages.yaml"
_PLACEHOLDER = re.compile(r"<[a-z_]+>")


@functools.lru_cache(maxsize=None)
def load_manifest(path: str | Path = MANIFEST) -> dict[str, dict]:
    """The committed manifest, stage name -> entry (shared: do not modify it)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as fh:
        return yaml.load(fh, Loader=loader) or {}


@functools.lru_cache(maxsize=None)
def _pattern(reason: str) -> re.Pattern | None:
    parts = _PLACEHOLDER.split(reason)
    return re.compile(r"\d+".join(map(re.escape, parts))) if len(parts) > 1 else None


def declared_meaning(rejects: dict[str, str], reason: str) -> str | None:
    """The meaning `rejects` declares for `reason`: its own entry, or that of the pattern it
    matches (`http_<status>` for `http_404`); None when it is not declared."""
    meaning = rejects.get(reason)
    if meaning is not None:
        return meaning
    for declared, text in rejects.items():
        pattern = _pattern(declared)
        if pattern is not None and pattern.fullmatch(reason):
            return text
    return None


# building the manifest (imports every stage: --write, --check and the tests only) ----------------

def stage_files() -> list[Path]:
    """stages/<group>/<stage>.py, every group but core; a family's helper modules (no STAGE) are not stages."""
    return sorted(p for p in STAGES_DIR.glob("*/*.py")
                  if p.parent.name != "core" and p.name != "__init__.py" and "\nSTAGE = Stage(" in p.read_text())


def entry(module: str, family: str) -> dict:
    """One stage's manifest entry, read from its module's STAGE."""
    from .stage import REQUIRED

    stage = importlib.import_module(module).STAGE
    params = {}
    for name, spec in stage.params.items():
        declared = {"type": spec.type.__name__}
        if spec.default is not REQUIRED:
            declared["default"] = json.loads(json.dumps(spec.default))  # tuples as lists: what a config holds
        if spec.schema:
            declared["schema"] = spec.schema
        params[name] = declared
    return {
        "module": module,
        "family": family,
        "version": stage.version,
        "inputs": {name: {"kind": spec.kind, "table": spec.table, "many": spec.many, "optional": spec.optional}
                   for name, spec in stage.inputs.items()},
        "outputs": {name: {"table": spec.table, "many": spec.many, "counted": spec.counted} for name, spec in stage.outputs.items()},
        "params": params,
        "prompts": list(stage.prompts),
        "rejects": dict(stage.rejects),
    }


def build() -> dict[str, dict]:
    """Every stage's entry, sorted by name (a stage's name is its module's file name)."""
    entries = {}
    for path in stage_files():
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        entries[path.stem] = entry(module, path.parent.name)
    return dict(sorted(entries.items()))


class _Dumper(yaml.SafeDumper):
    """Stage entries as blocks; each input, output and param on one line; prompts on one line."""


class _Flow(dict):
    pass


class _FlowList(list):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v.items(), flow_style=True))
_Dumper.add_representer(_FlowList, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))


def render(manifest: dict[str, dict]) -> str:
    styled = {
        name: {
            **e,
            **{key: {n: _Flow(spec) for n, spec in e[key].items()} for key in ("inputs", "outputs", "params")},
            "prompts": _FlowList(e["prompts"]),
        }
        for name, e in manifest.items()
    }
    header = ("# GENERATED from every stage's STAGE declaration by `python -m stages.core.declarations --write`:\n"
              "# edit the stages, not this file. Read it with stages.core.declarations.load_manifest().\n")
    return header + yaml.dump(styled, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True, default_flow_style=False)


def differences(committed: dict, current: dict) -> list[str]:
    """What differs, per stage and key, between the committed manifest and the declarations."""
    out = [f"{name}: not in the stages" for name in sorted(set(committed) - set(current))]
    out += [f"{name}: missing" for name in sorted(set(current) - set(committed))]
    for name in sorted(set(committed) & set(current)):
        keys = [key for key in current[name] if committed[name].get(key) != current[name][key]]
        keys += [key for key in committed[name] if key not in current[name]]
        if keys:
            out.append(f"{name}: {', '.join(keys)} differ")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.core.declarations", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="(re)write schemas/stages.yaml")
    group.add_argument("--check", action="store_true", help="exit 1 if schemas/stages.yaml differs from the declarations")
    args = parser.parse_args(argv)
    current = build()
    text = render(current)
    where = MANIFEST.relative_to(ROOT)
    if MANIFEST.exists() and MANIFEST.read_text(encoding="utf-8") == text:
        return 0
    if args.write:
        MANIFEST.write_text(text, encoding="utf-8")
        print(f"wrote {where}")
        return 0
    committed = (yaml.safe_load(MANIFEST.read_text(encoding="utf-8")) or {}) if MANIFEST.exists() else {}
    found = differences(committed, current) or ["the layout of the file (regenerate it)"]
    print(f"{where} is out of date (run python -m stages.core.declarations --write): " + "; ".join(found), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
