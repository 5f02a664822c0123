"""Where stages live and which code a stage runs, read from the source tree without importing it.

Stages are grouped one folder per family or shared step (`stages/<group>/<stage>.py`); a stage's
name is unique across groups, so rules and tests name stages, not paths. Snakemake cannot see
imports, so a rule lists a stage's *import closure* as inputs: the stage module and every module
under `stages/` it imports, directly or not. Editing `stages/core/refs.py` then reruns exactly the
rules whose stages use it. The scan reads the AST only (no heavy imports at DAG parse time).
"""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

import yaml

STAGES_DIR = Path(__file__).resolve().parents[1]
ROOT = STAGES_DIR.parent
PROMPTS_DIR = ROOT / "prompts"
ANSWER_SCHEMAS_DIR = ROOT / "schemas" / "answers"
# A name that becomes one folder (a run under data/runs/, a release under data/releases/): no
# slash, no leading dot, so neither "..", "/abs" nor "a/b" can leave the folder it is named in; at
# most 128 characters, so that it and what is added to it fit a file name.
PLAIN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"


class LayoutError(LookupError):
    pass


@lru_cache(maxsize=None)
def stage_path(name: str) -> Path:
    """stages/<group>/<name>.py; exactly one group holds each stage."""
    found = [p for p in STAGES_DIR.glob(f"*/{name}.py") if p.parent.name != "core"]
    if len(found) != 1:
        where = ", ".join(str(p.relative_to(ROOT)) for p in found) or "no stages/<group>/ folder"
        raise LayoutError(f"stage {name!r}: expected one module stages/<group>/{name}.py, found {where}")
    return found[0]


def stage_module(name: str) -> str:
    """The dotted module `python -m` runs: stages.<group>.<name>."""
    return ".".join(stage_path(name).relative_to(ROOT).with_suffix("").parts)


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parts[:-1])


@lru_cache(maxsize=None)
def _direct_imports(path: Path) -> tuple[Path, ...]:
    """Files under stages/ that one module imports (absolute `stages.` or relative imports)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[Path] = set()
    package = _package_of(path)
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            # `from stages.core import refs` names a submodule; `from stages.core.refs import x` a module
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        for dotted in names:
            if dotted == "stages" or dotted.startswith("stages."):
                parts = dotted.split(".")
                for i in range(1, len(parts) + 1):  # packages run their __init__ on the way down
                    file = _module_file(".".join(parts[:i]))
                    if file is not None:
                        found.add(file)
    found.discard(path)
    return tuple(sorted(found))


@lru_cache(maxsize=None)
def import_closure(path: Path) -> tuple[Path, ...]:
    """The module and every stages/ module it imports, transitively, sorted."""
    seen: set[Path] = set()
    todo = [path]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        todo.extend(_direct_imports(current))
    return tuple(sorted(seen))


def stage_sources(name: str) -> list[str]:
    """The stage's import closure, with its group's __init__, as repo-relative paths (rule inputs)."""
    path = stage_path(name)
    files = set(import_closure(path)) | {p for p in [path.parent / "__init__.py"] if p.is_file()}
    return [str(p.relative_to(ROOT)) for p in sorted(files)]


def prompt_sources(*prompts: str) -> list[str]:
    """Prompt files and the answer schemas their front matter names (rule inputs)."""
    out = []
    for prompt in prompts:
        path = PROMPTS_DIR / f"{prompt}.md"
        if not path.is_file():
            raise LayoutError(f"prompt {prompt!r}: no file {path.relative_to(ROOT)}")
        out.append(str(path.relative_to(ROOT)))
        text = path.read_text()
        if text.startswith("---"):
            front = yaml.safe_load(text.split("---", 2)[1]) or {}
            if front.get("schema"):
                out.append(str((ANSWER_SCHEMAS_DIR / front["schema"]).relative_to(ROOT)))
    return out
