"""Prompts as files (docs/ARCHITECTURE.md "Models").

A prompt is `prompts/<name>.md`: YAML front matter, then a Jinja2 body that becomes the user
message.

    ---
    kind: json                       # json | text | yesno
    schema: m2rag_query_filter.json  # JSON Schema in schemas/answers/ (json prompts only)
    temperature: 0                   # default sampling params; a request may override them
    max_tokens: 256
    system: You are ...              # optional system message
    ---
    # Task Description
    ... {{ question }} ...

Inside a stage run, rendering a prompt the stage does not declare (`Stage.prompts`) fails naming
both: the declaration is what the rules list as the stage's prompt inputs, so it cannot go stale.

Rendering uses StrictUndefined, so a missing variable fails naming the prompt file, the variable
and its line; a template syntax error fails on loading, naming the file and the line. Line numbers
count from the top of the file, front matter included. Both are StageErrors: one line from a stage.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import jsonschema
import yaml

from .errors import StageError
from .stage import running_stage

ROOT = Path(__file__).resolve().parents[2]
PROMPTS_DIR = ROOT / "prompts"
ANSWER_SCHEMAS_DIR = ROOT / "schemas" / "answers"

KINDS = ("json", "text", "yesno")
SAMPLING_KEYS = ("temperature", "max_tokens", "top_p", "top_k", "seed")
_FRONT_KEYS = {"kind", "schema", "system", *SAMPLING_KEYS}


class PromptError(StageError):
    """A prompt file that cannot be loaded, or a render that lacks a variable."""


@dataclass(frozen=True)
class Prompt:
    name: str
    kind: str
    schema_name: str | None
    schema: dict | None
    sampling: dict[str, Any]
    system: str | None
    body: str
    path: Path
    body_line: int  # the file's line number of the body's first line
    _template: jinja2.Template = field(repr=False, compare=False)

    def render(self, variables: dict[str, Any]) -> list[dict[str, str]]:
        """Chat messages (system first when the prompt has one) for these variables."""
        stage = running_stage()
        if stage is not None and self.name not in stage.prompts:
            raise PromptError(f"stage {stage.name} renders prompt {self.name!r}, which it does not declare; add it to STAGE.prompts "
                              f"(declared: {', '.join(stage.prompts) or 'none'})")
        try:
            text = self._template.render(**variables)
        except jinja2.UndefinedError as err:
            line = _template_line(err)
            where = f" at line {self.body_line + line - 1}" if line else ""
            raise PromptError(f"prompt {self.name!r} ({self.path}){where}: missing variable: {err.message}") from None
        messages = [{"role": "system", "content": self.system}] if self.system else []
        messages.append({"role": "user", "content": text.strip()})
        return messages


_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)


def _template_line(err: Exception) -> int | None:
    """The template line a render error was raised at (Jinja2 puts template lines in tracebacks)."""
    line, tb = None, err.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def split_front_matter(text: str, where: str) -> tuple[dict, str]:
    if not text.startswith("---\n"):
        raise PromptError(f"{where}: a prompt file starts with '---' front matter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise PromptError(f"{where}: front matter is not closed by a '---' line")
    front = yaml.safe_load(text[4:end]) or {}
    if not isinstance(front, dict):
        raise PromptError(f"{where}: front matter must be a mapping")
    return front, text[end + 5 :]


def load_prompt(path: str | Path, schemas_dir: str | Path = ANSWER_SCHEMAS_DIR) -> Prompt:
    path = Path(path)
    if not path.exists():
        raise PromptError(f"no prompt file {path}")
    text = path.read_text()
    front, body = split_front_matter(text, str(path))
    body_line = text[: len(text) - len(body)].count("\n") + 1
    unknown = sorted(set(front) - _FRONT_KEYS)
    if unknown:
        raise PromptError(f"{path}: unknown front matter key(s) {unknown} (allowed: {sorted(_FRONT_KEYS)})")
    kind = front.get("kind", "json" if "schema" in front else "text")
    if kind not in KINDS:
        raise PromptError(f"{path}: kind must be one of {KINDS}, got {kind!r}")
    schema_name = front.get("schema")
    schema = None
    if kind == "json":
        if not schema_name:
            raise PromptError(f"{path}: a json prompt names its answer schema (schema: <file in {schemas_dir}>)")
        schema = load_answer_schema(schema_name, Path(schemas_dir))
    elif schema_name:
        raise PromptError(f"{path}: only json prompts take a schema (kind is {kind})")
    try:
        template = _ENV.from_string(body)
    except jinja2.TemplateSyntaxError as err:
        raise PromptError(f"{path}: template syntax error at line {body_line + err.lineno - 1}: {err.message}") from None
    sampling = {k: front[k] for k in SAMPLING_KEYS if k in front}
    return Prompt(path.stem, kind, schema_name, schema, sampling, front.get("system"), body, path, body_line, template)


def load_answer_schema(name: str, schemas_dir: Path = ANSWER_SCHEMAS_DIR) -> dict:
    path = schemas_dir / name
    if not path.exists():
        raise PromptError(f"no answer schema {path}")
    schema = json.loads(path.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    _require_max_length(schema, path, "$")
    return schema


def _require_max_length(node: Any, path: Path, where: str) -> None:
    """String fields must be bounded: the tiny embedded model runs away on unbounded strings."""
    if isinstance(node, dict):
        if node.get("type") == "string" and "maxLength" not in node and "enum" not in node and "const" not in node:
            raise PromptError(f"{path}: string field at {where} needs maxLength")
        for key, value in node.items():
            _require_max_length(value, path, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _require_max_length(value, path, f"{where}[{i}]")


class PromptLibrary:
    """Loads prompts by name from one folder, once each."""

    def __init__(self, prompts_dir: str | Path = PROMPTS_DIR, schemas_dir: str | Path = ANSWER_SCHEMAS_DIR):
        self.prompts_dir = Path(prompts_dir)
        self.schemas_dir = Path(schemas_dir)
        self._loaded: dict[str, Prompt] = {}

    def get(self, name: str) -> Prompt:
        if name not in self._loaded:
            self._loaded[name] = load_prompt(self.prompts_dir / f"{name}.md", self.schemas_dir)
        return self._loaded[name]

