"""Generate each family's config schema from the `Param` declarations of the stages it feeds.

A setting is declared once, on its stage (`Param(int, 8, "...", min=1)`). The hand-written part
of a section is its template, `schemas/config/<section>.template.yaml`: the keys that are not a
stage's params (`enabled`, dump files that are rule inputs, the evaluated models' names) and one
placeholder per stage subsection:

    cache_images:                  # the subsection is named after the stage it feeds
      x-stage: cache_images        # -> an object of that stage's params, help as descriptions
      x-except: [store, fetch]     # params the rule sets itself (from run-wide keys)
      # or x-only: [vision, llm]; `properties`/`required` given here add hand-written keys
    # a stage of the family (stages/<section>/) the template does not name gets `x-stage` of all
    # its params, none required (its rule may wire them)
    store: {x-param: cache_images.store}   # one param's schema, for a key several stages share

`python -m stages.core.config_schema --write` writes `schemas/config/<section>.schema.yaml`;
`--check` exits non-zero when a committed file differs from what the Params give (the test suite
runs the same comparison). Snakemake validates against the committed files and never imports a
stage module at parse time; this generator does, so it runs only when asked.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

import yaml

from .schema_check import SCHEMAS
from .layout import stage_module
from .stage import REQUIRED, Param

TEMPLATES = SCHEMAS / "config"
KEYS = ("x-stage", "x-except", "x-only", "x-param", "x-auto")


class TemplateError(ValueError):
    pass


def stage_params(name: str) -> dict[str, Param]:
    return importlib.import_module(stage_module(name)).STAGE.params


def _stage_object(node: dict, where: str) -> dict:
    stage = node["x-stage"]
    params = stage_params(stage)
    named = [*node.get("x-except", []), *node.get("x-only", [])]
    unknown = sorted(set(named) - set(params))
    if unknown:
        raise TemplateError(f"{where}: {stage} has no param(s) {unknown}")
    if "x-only" in node:
        selected = {n: params[n] for n in node["x-only"]}
    else:
        selected = {n: p for n, p in params.items() if n not in node.get("x-except", [])}
    out: dict[str, Any] = {
        "type": "object",
        "additionalProperties": False,
        "description": node.get("description", f"params of {stage} (python -m {stage_module(stage)} --help)"),
    }
    # x-auto: a subsection the template does not name, where the rule may wire the required params
    required = [*node.get("required", []), *(n for n, p in selected.items() if p.default is REQUIRED and not node.get("x-auto"))]
    if required and "enabled" in node.get("properties", {}):  # a step that runs only when `enabled: true` needs them only then
        out["if"] = {"properties": {"enabled": {"const": True}}, "required": ["enabled"]}
        out["then"] = {"required": required}
    elif required:
        out["required"] = required
    extra = {k: v for k, v in node.items() if k not in (*KEYS, "description", "required", "properties")}
    out.update(_expand(extra, where))
    out["properties"] = {
        **{n: p.json_schema() for n, p in selected.items()},
        **_expand(node.get("properties", {}), where),
    }
    return out


def _expand(node: Any, where: str) -> Any:
    if isinstance(node, list):
        return [_expand(item, where) for item in node]
    if not isinstance(node, dict):
        return node
    if "x-stage" in node:
        return _stage_object(node, where)
    if "x-param" in node:
        stage, _, name = node["x-param"].partition(".")
        params = stage_params(stage)
        if name not in params:
            raise TemplateError(f"{where}: {stage} has no param {name!r}")
        rest = {k: v for k, v in node.items() if k != "x-param"}
        return {**params[name].json_schema(), **_expand(rest, where)}
    return {key: _expand(value, f"{where}.{key}") for key, value in node.items()}


class _Dumper(yaml.SafeDumper):
    """Block style, except lists of scalars on one line (`type: [string, 'null']`)."""


def _list(dumper: yaml.SafeDumper, items: list) -> yaml.Node:
    flat = all(not isinstance(item, (dict, list)) for item in items)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=flat)


_Dumper.add_representer(list, _list)


def family_stages(section: str) -> list[str]:
    """The stages of the family a section is named after (stages/<section>/)."""
    from .declarations import stage_files  # stage modules only, not a family's helpers

    return sorted(p.stem for p in stage_files() if p.parent.name == section)


def render(template: Path) -> str:
    """The generated schema file's text for one template: a family's stage that the template does
    not name gets its subsection of all its params (`<section>.<stage>`, the rule's own section)."""
    text = template.read_text()
    comments = [line for line in text.splitlines() if line.startswith("#")]
    section = template.name.removesuffix(".template.yaml")
    node = yaml.safe_load(text)
    properties = node.setdefault("properties", {})
    for stage in family_stages(section):
        properties.setdefault(stage, {"x-stage": stage, "x-auto": True})
    schema = _expand(node, section)
    header = [
        *comments,
        f"# GENERATED from {template.name} and the stages' Param declarations by",
        "# `python -m stages.core.config_schema --write`: edit those, not this file.",
    ]
    body = yaml.dump(schema, Dumper=_Dumper, sort_keys=False, width=1000, allow_unicode=True, default_flow_style=False)
    return "\n".join(header) + "\n" + body


def outputs(templates: Path = TEMPLATES) -> dict[Path, str]:
    """Generated file -> its text, for every template."""
    return {
        t.with_name(t.name.replace(".template.yaml", ".schema.yaml")): render(t)
        for t in sorted(templates.glob("*.template.yaml"))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stages.core.config_schema", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="(re)write schemas/config/<section>.schema.yaml")
    group.add_argument("--check", action="store_true", help="exit 1 if a committed file differs from the Params")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if path.exists() and path.read_text() == text:
            continue
        if args.write:
            path.write_text(text)
            print(f"wrote {path.relative_to(SCHEMAS.parent)}")
        else:
            stale.append(str(path.relative_to(SCHEMAS.parent)))
    if stale:
        print(f"out of date (run python -m stages.core.config_schema --write): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
