"""Bad inputs of the model layer, each through a model stage's real CLI (filter_queries): a call
cache that is not SQLite or cannot be written, and a prompt file with a template syntax error or a
variable the stage does not give. Each ends in one clear line naming the file (and the line or the
variable), no traceback, no output; all of them fail before any model is loaded."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from stages.core.layout import stage_module
from stages.core.tables import write_table
from tests.conftest import REPO

PROMPT = "m2rag_query_clear"  # the first prompt filter_queries renders


def not_sqlite(tmp: Path) -> tuple[dict, str]:
    cache = tmp / "cache" / "llm.sqlite"
    cache.parent.mkdir()
    cache.write_bytes(b"model answers, but not an SQLite file\n" * 50)
    return {"cache": {"path": str(cache)}}, f"model cache {cache} is not an SQLite database"


def read_only_file(tmp: Path) -> tuple[dict, str]:
    cache = tmp / "cache" / "llm.sqlite"
    cache.parent.mkdir()
    sqlite3.connect(cache).execute("create table calls (key text primary key)").connection.close()
    cache.chmod(0o444)
    return {"cache": {"path": str(cache)}}, f"model cache {cache} cannot be written"


def read_only_folder(tmp: Path) -> tuple[dict, str]:
    cache = tmp / "cache" / "llm.sqlite"
    cache.parent.mkdir()
    cache.parent.chmod(0o555)  # no room for the WAL's -wal and -shm files, nor a new cache
    return {"cache": {"path": str(cache)}}, f"model cache {cache} cannot be written"


def broken_prompt(tmp: Path, line: str) -> tuple[dict, Path, int]:
    """A prompts folder whose PROMPT ends with `line`; returns the llm settings, the file, its line."""
    folder = tmp / "prompts"
    shutil.copytree(REPO / "prompts", folder)
    path = folder / f"{PROMPT}.md"
    text = path.read_text()
    path.write_text(text + line + "\n")
    return {"prompts_dir": str(folder), "cache": {"path": str(tmp / "llm.sqlite")}}, path, len(text.splitlines()) + 1


def syntax_error(tmp: Path) -> tuple[dict, str]:
    llm, path, line = broken_prompt(tmp, "{% if %}")
    return llm, f"{path}: template syntax error at line {line}: "


def missing_variable(tmp: Path) -> tuple[dict, str]:
    llm, path, line = broken_prompt(tmp, "Also consider {{ subreddit_rules }}.")
    return llm, f"prompt '{PROMPT}' ({path}) at line {line}: missing variable: 'subreddit_rules' is undefined"


def nul_in_cache_path(tmp: Path) -> tuple[dict, str]:
    return {"cache": {"path": f"{tmp}/ca\x00che.sqlite"}}, "param 'llm.cache.path' must be a path without a NUL character"


def too_many_in_flight(tmp: Path) -> tuple[dict, str]:  # the HTTP pool would be sized to it: memory, then a kill
    return {"backend": "openai", "openai": {"max_in_flight": 10**9}}, "param 'llm.openai.max_in_flight' must be <= 4096"


def timeout_past_the_clock(tmp: Path) -> tuple[dict, str]:  # a deadline past time_t
    return {"backend": "openai", "openai": {"timeout_s": 1e308}}, "param 'llm.openai.timeout_s' must be <= 86400"


CASES = {  # kind of bad input -> what makes it, and the message the user gets
    "cache_path_with_a_nul": nul_in_cache_path,
    "max_in_flight_past_any_server": too_many_in_flight,
    "timeout_past_the_clock": timeout_past_the_clock,
    "cache_not_sqlite": not_sqlite,
    "cache_read_only_file": read_only_file,
    "cache_read_only_folder": read_only_folder,
    "prompt_syntax_error": syntax_error,
    "prompt_missing_variable": missing_variable,
}


def without_dac_override() -> list[str]:
    """Root writes read-only files anyway (CAP_DAC_OVERRIDE): run the stage without that power."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): file modes cannot be made to bind")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.mark.parametrize("kind", list(CASES))
def test_bad_model_input_is_one_clear_line(tmp_path, kind):
    queries = tmp_path / "queries.parquet"
    write_table(queries, [{"id": "eli5:0", "question": "Why do onions make you cry?", "body": "", "subreddit": "explainlikeimfive",
                           "answers": ["An answer."], "source": "json:train"}], "m2rag_queries")
    llm, expected = CASES[kind](tmp_path)
    out = tmp_path / "out" / "filtered.parquet"
    out.parent.mkdir()
    command = [sys.executable, "-m", stage_module("filter_queries"), "--input", f"queries={queries}",
               "--output", f"filtered_queries={out}", "--params", json.dumps({"apply": False, "llm": llm})]
    result = subprocess.run(without_dac_override() + command, cwd=REPO, capture_output=True, text=True)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert last.startswith("filter_queries: error: ") and expected in last, last
    assert list(out.parent.iterdir()) == []  # nothing written, not even a sidecar
