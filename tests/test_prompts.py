"""Prompt files: front matter, answer schemas, strict rendering; the M2RAG prompts keep the seed's
label scales."""
from __future__ import annotations

import pytest

from stages.core.prompts import PromptError, PromptLibrary, load_prompt


def write(folder, name, text):
    path = folder / f"{name}.md"
    path.write_text(text)
    return path


def test_renders_messages_with_system_and_sampling(tmp_path):
    path = write(tmp_path, "p", "---\nkind: text\nsystem: Be brief.\ntemperature: 0.2\nmax_tokens: 9\n---\nHello {{ who }}!\n")
    prompt = load_prompt(path)
    assert prompt.kind == "text" and prompt.sampling == {"temperature": 0.2, "max_tokens": 9}
    assert prompt.render({"who": "Ada"}) == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello Ada!"}]


def test_missing_variable_fails_naming_it(tmp_path):
    prompt = load_prompt(write(tmp_path, "p", "---\nkind: text\n---\n{{ question }} and {{ context }}\n"))
    with pytest.raises(PromptError, match="prompt 'p'.*missing variable: 'context' is undefined"):
        prompt.render({"question": "why?"})


@pytest.mark.parametrize(
    "text, message",
    [
        ("no front matter\n", "starts with '---'"),
        ("---\nkind: text\n", "not closed"),
        ("---\nkind: poem\n---\nx\n", "kind must be one of"),
        ("---\nkind: json\n---\nx\n", "names its answer schema"),
        ("---\nkind: text\ntemprature: 0\n---\nx\n", "unknown front matter key"),
        ("---\nkind: json\nschema: nowhere.json\n---\nx\n", "no answer schema"),
        ("---\nkind: text\n---\n{% if %}\n", "template syntax error"),
    ],
)
def test_bad_prompt_files_fail_clearly(tmp_path, text, message):
    with pytest.raises(PromptError, match=message):
        load_prompt(write(tmp_path, "bad", text))


def test_answer_string_fields_need_max_length(tmp_path):
    (tmp_path / "loose.json").write_text('{"type": "object", "properties": {"why": {"type": "string"}}}')
    path = write(tmp_path, "p", "---\nkind: json\nschema: loose.json\n---\nx\n")
    with pytest.raises(PromptError, match=r"string field at \$\.properties\.why needs maxLength"):
        load_prompt(path, tmp_path)


def test_m2rag_prompts_keep_the_seed_scales():
    library = PromptLibrary()
    for name in ("m2rag_query_clear", "m2rag_query_images"):
        prompt = library.get(name)
        assert prompt.kind == "json" and prompt.sampling["temperature"] == 0
        assert prompt.schema["properties"]["label"]["enum"] == [0, 1]
        assert list(prompt.schema["properties"]) == ["analysis", "label"]  # the seed's two lines, in order
    classify = library.get("m2rag_query_classify")
    categories = [{"id": 1, "name": "Society & Culture", "description": "customs", "example": "Why do people bow?"},
                  {"id": 11, "name": "Others", "description": "", "example": ""}]
    text = classify.render({"question": "Why do we bow?", "categories": categories})[-1]["content"]
    assert "1. Society & Culture: customs Example: Why do people bow?\n" in text and "11. Others\n" in text and "Why do we bow?" in text
    one_of = classify.schema["properties"]["categories"]["anyOf"]
    assert one_of[0]["items"]["maximum"] == 10 and one_of[1]["items"]["const"] == 11 and one_of[1]["maxItems"] == 1
