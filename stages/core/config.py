"""Config validation against `schemas/config.schema.yaml` before any job runs.

The top-level schema holds the run-wide keys and `$ref`s one schema per section
(`schemas/config/<section>.schema.yaml`), so each benchmark family owns its own file. Every object
sets `additionalProperties: false`, so a typo'd key fails naming its full path.
"""
from __future__ import annotations

from pathlib import Path

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


class ConfigError(ValueError):
    pass


def _registry(root: Path) -> Registry:
    resources = []
    for path in sorted(root.rglob("*.schema.yaml")):
        uri = path.relative_to(root).as_posix()
        resources.append((uri, Resource.from_contents(yaml.safe_load(path.read_text()), default_specification=DRAFT202012)))
    return Registry().with_resources(resources)


def validate_config(config: dict, schemas: Path = SCHEMAS) -> None:
    """Raise ConfigError naming every bad key (dotted path) and why."""
    schema = yaml.safe_load((schemas / "config.schema.yaml").read_text())
    validator = jsonschema.Draft202012Validator(schema, registry=_registry(schemas))
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if not errors:
        return
    lines = []
    for err in errors:
        where = ".".join(str(p) for p in err.absolute_path) or "<top level>"
        if err.validator == "additionalProperties":
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
            for key in extra:
                key_path = f"{where}.{key}" if err.absolute_path else key
                allowed = ", ".join(sorted(err.schema.get("properties", {})))
                lines.append(f"unknown config key '{key_path}' (allowed here: {allowed})")
        else:
            lines.append(f"config key '{where}': {err.message}")
    raise ConfigError("invalid config:\n  " + "\n  ".join(lines))
