"""The one JSON Schema checker of the project's settings: the config (stages/core/config.py) and a
stage's `--params` (`Param.check`) go through it, so both say the same thing in the same words:
`<key> must be >= 1, got 0`, `<key> must be one of [...]`, `<key> is unknown (allowed here: ...)`.

Integers are strict (2.0 is not an int: a stage handed 2.0 for a count would fail later) and
`format: cidr` is checked the way the fetch layer's address guard parses networks.
"""
from __future__ import annotations

import ipaddress
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

import jsonschema
import yaml
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from .layout import PLAIN_NAME

NO_NUL = r"^[^\x00]*$"  # the pattern of a path in a hand-written config schema (llm.schema.yaml)

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _is_integer(checker, value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("cidr", raises=ValueError)
def _is_cidr(value: Any) -> bool:
    if isinstance(value, str):
        ipaddress.ip_network(value, strict=False)  # what the fetch layer's address guard parses
    return True


@lru_cache(maxsize=None)
def _registry(root: Path) -> Registry:
    """The schemas under `root` by relative path, each read when a `$ref` first reaches it: a
    stage's start checks its params against a few of them, and building Python objects from
    every YAML schema cost 0.3 s of CPU at every stage start."""
    return Registry(retrieve=lambda uri: _schema(root, uri))


@lru_cache(maxsize=None)
def _schema(root: Path, uri: str) -> Resource:
    path = root / uri
    if not uri.endswith(".schema.yaml") or not path.is_file():
        raise FileNotFoundError(f"no schema {uri!r} under {root}")
    # libyaml's loader where present (the pure-Python one costs several times more)
    loaded = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return Resource.from_contents(loaded, default_specification=DRAFT202012)


_FORMAT_WORDS = {"cidr": "a CIDR network such as 10.0.0.0/8 or 127.0.0.1/32"}
_PY_TYPES = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "array": "list", "object": "dict", "null": "null"}


def _problem(err: jsonschema.ValidationError) -> str:
    """The end of a one-line message `<key> <problem>`, in the words of a Param declaration."""
    value, expected = err.instance, err.validator_value
    if err.validator == "type":
        kinds = [expected] if isinstance(expected, str) else expected
        return f"must be {' or '.join(_PY_TYPES[k] for k in kinds)}, got {type(value).__name__} {value!r}"
    if err.validator == "enum":
        return f"must be one of {expected}, got {value!r}"
    if err.validator == "const":
        return f"must be {expected!r}, got {value!r}"
    if err.validator in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        op = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}[err.validator]
        return f"must be {op} {expected}, got {value!r}"
    if err.validator in ("minItems", "maxItems", "minProperties", "maxProperties", "minLength", "maxLength"):
        least = "at least" if err.validator.startswith("min") else "at most"
        what = {"I": "items", "P": "keys", "L": "characters"}[err.validator[3]]
        return f"must have {least} {expected} {what}, got {len(value)}"
    if err.validator == "pattern" and expected == PLAIN_NAME:
        return f"must be a plain name (letters, digits, '_', '.', '-'; no '/', not starting with '.'; at most 128 characters), got {value!r}"[:300]
    if err.validator == "pattern" and expected == NO_NUL:
        return f"must be a path without a NUL character, got {value!r}"
    if err.validator == "pattern":
        return f"must match {expected}, got {value!r}"
    if err.validator == "format":
        return f"must be {_FORMAT_WORDS.get(expected, expected)}, got {value!r}"
    if err.validator == "not" and set(expected) == {"enum"}:
        return f"must not be any of {json.dumps(expected['enum'])}, got {value!r}"
    if err.validator == "required":
        missing = [key for key in expected if key not in value]
        return f"misses required key(s) {missing}"
    return err.message


def _validator(schema: dict, root: Path, base: str | None):
    """The checker of `schema`, its `$ref`s resolved from `base` inside `root` (see schema_errors)."""
    if base is not None:
        schema = {"$id": f"{base}_check.schema.yaml", **schema}
    return Validator(schema, registry=_registry(root), format_checker=FORMATS)


def schema_errors(schema: dict, value: Any, root: Path = SCHEMAS, base: str | None = "config/") -> Iterator[tuple[str, str, str]]:
    """(dotted path, problem, JSON Schema keyword) for each way `value` breaks `schema`, sorted by
    path. `$ref`s resolve from `base` inside `root` (by default as if the schema sat in
    schemas/config/: `llm.schema.yaml`). An unknown key comes as (path to the key, "is unknown
    (allowed here: ...)", "additionalProperties")."""
    for err in sorted(_validator(schema, root, base).iter_errors(value), key=lambda e: list(map(str, e.absolute_path))):
        where = "".join(f".{part}" for part in err.absolute_path)
        if err.validator == "additionalProperties" and err.validator_value is False:
            allowed = ", ".join(sorted(err.schema.get("properties", {})))
            for key in sorted(set(err.instance) - set(err.schema.get("properties", {}))):
                yield f"{where}.{key}", f"is unknown (allowed here: {allowed})", err.validator
        else:
            yield where, _problem(err), err.validator


# A number written with an exponent. YAML 1.2 and JSON read 1e-5, 2E10 and 1.5e3 as numbers; YAML 1.1
# (PyYAML, which Snakemake reads config files with) reads them as text, as it wants both a dot and
# the exponent's sign (1.0e-5).
_EXPONENT_NUMBER = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")


def read_exponent_numbers(schema: dict, value: Any, root: Path = SCHEMAS, base: str | None = "config/") -> None:
    """Turn, in place, each string `value` holds where `schema` takes a number and the string is
    one written with an exponent (`threshold: 1e-5`) into that float: the number the config's
    author wrote, which YAML 1.1 read as text. Any other string stays, for the check to name."""
    for err in list(_validator(schema, root, base).iter_errors(value)):
        kinds = [err.validator_value] if isinstance(err.validator_value, str) else err.validator_value
        if (err.validator == "type" and "number" in kinds and isinstance(err.instance, str)
                and _EXPONENT_NUMBER.fullmatch(err.instance) and err.absolute_path):
            *parents, key = err.absolute_path
            holder = value
            for part in parents:
                holder = holder[part]
            holder[key] = float(err.instance)


def read_json(text: str | bytes) -> Any:
    """json.loads for JSON from outside (a server's answer, a line of a file): JSON nested deeper than
    Python's reader goes ("[[[[...") is a ValueError, as any other unreadable JSON is, not a
    RecursionError out of the stage."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested deeper than Python reads") from None


def answer_problem(schema: dict, value: Any) -> str | None:
    """The first way a server's parsed JSON answer breaks `schema` (its API's shape, declared by
    the client that reads it), as one line: `results.3.url must be str, got int 5`; None when it
    fits. Every HTTP answer is untrusted input: a client checks it here before reading a field."""
    for where, problem, _ in schema_errors(schema, value, base=None):
        line = f"{where.lstrip('.') or 'the answer'} {problem}"
        return line if len(line) <= 300 else line[:297] + "..."
    return None
