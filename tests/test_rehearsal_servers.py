"""scripts/rehearsal_servers.py: the stand-ins of config/recipe_real.yaml's endpoints, called over
real HTTP through the project's model client (stages/core/llm) with each role's own settings: one
stand-in per distinct endpoint, the recipe's model names only (404 otherwise, in the API's error
shape), each hosted endpoint's own key (401 otherwise), images only for vision models (400
otherwise), schema-valid deterministic answers for every prompt, yes/no log-probabilities, token
usage, max_tokens cuts, latency, Qwen3's thinking block unless enable_thinking is false, per-role
call counts; and the CLI's endpoint map, overlay and counts files."""
from __future__ import annotations

import importlib.util
import io
import json
import math
import signal
import subprocess
import sys
import time
from pathlib import Path

import jinja2
import pytest
import requests
import yaml
from PIL import Image

from stages.core.images import ImageStore
from stages.core.llm import LLMClient, LLMRequest, llm_settings

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("rehearsal_servers", REPO / "scripts" / "rehearsal_servers.py")
rs = importlib.util.module_from_spec(_spec)
sys.modules["rehearsal_servers"] = rs
_spec.loader.exec_module(rs)

LLM_SCHEMA = yaml.safe_load((REPO / "schemas" / "config" / "llm.schema.yaml").read_text())
HAS_EXTRA_BODY = "extra_body" in LLM_SCHEMA["properties"]["openai"]["properties"]
CONFIGS = [str(REPO / "config" / "config.yaml"), str(REPO / "config" / "recipe_real.yaml")]


def recipe() -> dict:
    config = rs.load_recipe(CONFIGS)
    if not HAS_EXTRA_BODY:  # llm.openai.extra_body comes with another branch; until it lands the model layer refuses it
        config["mavis"]["filter_entailment_text"]["llm"]["openai"].pop("extra_body")
    return config


@pytest.fixture(scope="module")
def stand_ins():
    with rs.StandIns(recipe(), latency_scale=0, serve_in_process=True) as running:
        yield running


@pytest.fixture
def keys(monkeypatch, stand_ins):
    for name, value in stand_ins.endpoint_map()["env"].items():
        monkeypatch.setenv(name, value)


def role(stand_ins, path: str) -> rs.Role:
    return next(r for r in stand_ins.roles if r.path == path)


def client(stand_ins, path: str, tmp_path, **changes) -> LLMClient:
    """The project's client with the role's own settings, pointed at its stand-in (as the overlay does)."""
    found = role(stand_ins, path)
    point = {"backend": "openai", "openai": {"base_url": found.stand_in, "max_retries": 1}}
    if found.backend != "openai":
        point["openai"]["api_key_env"] = None
    settings = llm_settings(found.settings, point, {"cache": {"mode": "off", "path": str(tmp_path / "llm.sqlite")}, "max_attempts": 1,
                                                    "image_store": str(tmp_path / "store")}, changes)
    return LLMClient(settings)


class Lenient(jinja2.ChainableUndefined):
    """Renders a prompt with no variables: loops empty, numbers 0, conditions false."""

    def __int__(self):
        return 0

    __index__ = __int__

    def __add__(self, other):
        return self

    __radd__ = __sub__ = __rsub__ = __mul__ = __add__

    def __eq__(self, other):
        return False

    def __lt__(self, other):
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __hash__(self):
        return 0


def test_every_prompt_is_recognised_by_its_fixed_lines():
    library = rs.Prompts()
    env = jinja2.Environment(undefined=Lenient)
    assert len(library.prompts) == len(list((REPO / "prompts").glob("*.md")))
    for name, prompt in library.prompts.items():
        text = f"{prompt.system or ''}\n{env.from_string(prompt.body).render().strip()}"
        assert library.identify(text) == name


def test_schema_instances_are_valid_and_seeded():
    import jsonschema

    library = rs.Prompts()
    for name, prompt in library.prompts.items():
        if prompt.kind == "json":
            for seed in range(100):  # every draw valid: lists of one to three items, unique where the schema says
                one = rs.schema_instance(prompt.schema, rs.Seeded(bytes([seed])))
                jsonschema.Draft202012Validator(prompt.schema).validate(one)
                assert one == rs.schema_instance(prompt.schema, rs.Seeded(bytes([seed]))), name
    lengths = {len(rs.schema_instance(library.prompts["mavis_atomic_facts"].schema, rs.Seeded(bytes([i])))["subclaims"]) for i in range(30)}
    assert lengths == {1, 2, 3}
    schema = library.prompts["mavis_eval_relevance"].schema  # an enum label: the hash picks among them
    assert len({json.dumps(rs.schema_instance(schema, rs.Seeded(bytes([i])))) for i in range(30)}) > 1


def test_one_stand_in_per_endpoint_of_the_real_recipe(stand_ins):
    served = {s["recipe"]: s for s in stand_ins.endpoint_map()["stand_ins"]}
    endpoints = {"https://api.openai.com/v1", "https://api.deepseek.com/v1", "http://localhost:8010/v1"} | {f"http://localhost:800{i}/v1" for i in range(1, 7)}
    assert endpoints <= set(served)
    assert set(served) - endpoints == {f"vllm:{m}" for m in ("openbmb/MiniCPM-V-2_6", "Qwen/Qwen2.5-7B-Instruct",
                                                             "Qwen/Qwen2-VL-7B-Instruct", "models/Qwen2.5-VL-7B-Instruct")}
    assert served["https://api.deepseek.com/v1"]["models"] == ["deepseek-chat"]
    assert served["https://api.deepseek.com/v1"]["key_envs"] == ["DEEPSEEK_API_KEY"] and served["http://localhost:8005/v1"]["key_envs"] == []
    assert {"gpt-4o-2024-08-06", "gpt-4o-2024-11-20", "gpt-4.1"} <= set(served["https://api.openai.com/v1"]["models"])
    assert served["https://api.openai.com/v1"]["flavour"] == "openai" and served["http://localhost:8001/v1"]["flavour"] == "vllm"
    roles = {r["path"]: r for r in stand_ins.endpoint_map()["roles"]}
    assert roles["m2rag.score_elements.llm"]["stand_in"] == served["https://api.deepseek.com/v1"]["url"]
    assert roles["mavis.filter_visual_dependency.answerers[2].llm"]["model"] == "mistralai/Mixtral-8x7B-Instruct-v0.1"
    assert roles["mavis.filter_visual_dependency.judge"]["stand_in"] == served["http://localhost:8004/v1"]["url"]
    assert roles["m2rag.score_elements.vision_llm"]["backend"] == "vllm"
    assert all(r["stand_in"] for r in roles.values())  # in-process roles served too (--serve-in-process)


def test_json_answers_usage_counts_and_determinism(stand_ins, keys, tmp_path):
    request = LLMRequest("p1", "m2rag_score_text", {"query": "Why is the sky blue?", "piece": "Rayleigh scattering.", "placeholder_example": "<image_1>"})
    with client(stand_ins, "m2rag.score_elements.llm", tmp_path) as deepseek:  # DeepSeek's endpoint, key and json_object mode
        first, again = deepseek.run([request]), deepseek.run([request])
    answer = first[0]
    assert answer.ok and set(answer.value) == {"analysis", "score"} and 0 <= answer.value["score"] <= 10
    assert answer.raw == again[0].raw and answer.prompt_tokens > 50 and answer.completion_tokens > 0
    url = role(stand_ins, "m2rag.score_elements.llm").stand_in
    assert stand_ins.counts[url]["models"]["deepseek-chat"]["m2rag_score_text"] >= 2

    # DeepSeek's JSON mode takes {"type": "json_object"} alone, and messages that ask for JSON
    body = {"model": "deepseek-chat", "max_tokens": 50, "messages": [{"role": "user", "content": "Give a JSON object."}]}
    headers = {"Authorization": "Bearer rehearsal-DEEPSEEK_API_KEY"}
    with_schema = requests.post(f"{url}/chat/completions", headers=headers, timeout=10,
                                json={**body, "response_format": {"type": "json_object", "schema": {"type": "object"}}})
    assert with_schema.status_code == 400 and "'schema' unexpected" in with_schema.json()["error"]["message"]
    unasked = requests.post(f"{url}/chat/completions", headers=headers, timeout=10,
                            json={**body, "messages": [{"role": "user", "content": "Say hi."}], "response_format": {"type": "json_object"}})
    assert unasked.status_code == 400 and "the word 'json'" in unasked.json()["error"]["message"]

    cut = LLMRequest("p2", "m2rag_score_text", request.variables, sampling={"max_tokens": 3})
    with client(stand_ins, "m2rag.score_elements.llm", tmp_path) as deepseek:
        [short] = deepseek.run([cut])
    assert not short.ok and short.finish_reason == "length" and short.error.startswith("non_json")


def test_qwen3_thinks_unless_asked_not_to(stand_ins, tmp_path):
    variables = {"premise": "Ash melts inside jet engines.", "hypothesis": "Volcanic ash harms jet engines."}
    with client(stand_ins, "mavis.filter_entailment_text.llm", tmp_path) as qwen3:
        [thought] = qwen3.run([LLMRequest("t1", "mavis_entail_text", variables)])
    if HAS_EXTRA_BODY:  # the recipe's extra_body turns the thinking block off: a yes/no answer scored as P(yes)
        assert thought.ok and thought.value in ("yes", "no") and 0 < thought.p_yes < 1
    else:  # the failure the recipe had: the 2-token answer is the start of a <think> block, not yes or no
        assert not thought.ok and thought.raw.startswith("<think") and thought.error.startswith("not_yes_no")
    url = role(stand_ins, "mavis.filter_entailment_text.llm").stand_in
    body = {"model": "Qwen/Qwen3-8B", "max_tokens": 2, "logprobs": True, "top_logprobs": 20,
            "messages": [{"role": "user", "content": "Premise: ash. Hypothesis: ash. Answer yes or no."}]}
    thinking = requests.post(f"{url}/chat/completions", json=body, timeout=10).json()
    assert thinking["choices"][0]["message"]["content"].startswith("<think")
    plain = requests.post(f"{url}/chat/completions", json={**body, "chat_template_kwargs": {"enable_thinking": False}}, timeout=10).json()
    choice = plain["choices"][0]
    top = {t["token"]: t["logprob"] for t in choice["logprobs"]["content"][0]["top_logprobs"]}
    assert choice["message"]["content"] in ("yes", "no") and set(top) == {"yes", "no"}
    assert math.isclose(math.exp(top["yes"]) + math.exp(top["no"]), 1.0) and top[choice["message"]["content"]] >= math.log(0.5)


def test_images_only_for_vision_models(stand_ins, tmp_path):
    buffer = io.BytesIO()
    Image.new("RGB", (32, 24), (200, 60, 30)).save(buffer, "JPEG")
    sha = ImageStore(tmp_path / "store").put(buffer.getvalue(), "jpg")
    seen = LLMRequest("i1", "mavis_entail_image", {"statement": "Ash melts inside jet engines.", "image_text": ""}, images=[sha])
    with client(stand_ins, "mavis.filter_entailment_image.llm", tmp_path) as vlm:  # Qwen2-VL on its vLLM stand-in
        [answer] = vlm.run([seen])
    assert answer.ok and answer.p_yes is not None
    blind = LLMRequest("i2", "mavis_answer_without_image", {"question": "What bird is this?"}, images=[sha])
    with client(stand_ins, "mavis.filter_visual_dependency.answerers[1].llm", tmp_path) as llama:  # text-only Llama-3.3-70B
        [refused] = llama.run([blind])
        [fine] = llama.run([LLMRequest("i3", "mavis_answer_without_image", {"question": "What bird is this?"})])
    assert not refused.ok and "HTTP 400" in refused.error and "not a multimodal model" in refused.raw
    assert fine.ok and fine.value


def test_wrong_model_and_wrong_key_are_refused_in_the_apis_shapes(stand_ins, keys, tmp_path, monkeypatch):
    request = LLMRequest("w1", "m2rag_score_text", {"query": "q", "piece": "p", "placeholder_example": "<image_1>"})
    with client(stand_ins, "llm", tmp_path, model="gpt-4o-mini") as wrong:
        [answer] = wrong.run([request])
    assert not answer.ok and "HTTP 404" in answer.error
    assert json.loads(answer.raw)["error"]["code"] == "model_not_found"  # OpenAI's shape
    local = role(stand_ins, "mavis.filter_visual_dependency.answerers[1].llm").stand_in
    vllm_shape = requests.post(f"{local}/chat/completions", json={"model": "gpt-4o", "messages": []}, timeout=10)
    assert vllm_shape.status_code == 404 and vllm_shape.json()["object"] == "error" and vllm_shape.json()["code"] == 404
    # the bug the recipe had the other way round: DeepSeek's endpoint sent the OpenAI key
    with client(stand_ins, "m2rag.score_elements.llm", tmp_path, openai={"api_key_env": "OPENAI_API_KEY"}) as leaky:
        [answer] = leaky.run([request])
    assert not answer.ok and "HTTP 401" in answer.error
    refused = stand_ins.counts[role(stand_ins, "m2rag.score_elements.llm").stand_in]["refused"]
    assert refused["deepseek-chat"]["401 m2rag_score_text"] >= 1


def test_text_answers_in_the_format_their_prompt_asks(stand_ins, keys, tmp_path):
    from stages.citeeval.citeeval_context import parse_categories
    from stages.eval_mavis.mavis_generate_queries import parse_queries

    sentences = [{"sentence_id": i, "sentence": f"Statement {i}."} for i in (1, 2, 3)]
    context = LLMRequest("c1", "citeeval_context", {"query": "q", "passages": [{"id": 1, "title": "", "text": "t"}], "sentences": sentences},
                         parse=lambda text: parse_categories(text, 3))
    queries = LLMRequest("q1", "mavis_eval_queries", {"n": 2, "question": "Why are my tomato leaves yellow?", "body": "", "images": 0,
                                                      "vision": False})
    with client(stand_ins, "llm", tmp_path) as gpt4o:
        categories, asked = gpt4o.run([context, queries])
    assert categories.ok and set(categories.value) == {1, 2, 3}
    assert asked.ok and parse_queries(asked.value, 2)[0] == "Why are my tomato leaves yellow"


def test_latency_is_realistic_unless_zero(tmp_path):
    config = {"llm": {"backend": "openai", "model": "m", "openai": {"base_url": "http://localhost:9/v1"}}}
    body = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "Say something."}]}
    for scale, at_least, at_most in ((1.0, rs.LATENCY_S, 5.0), (0.0, 0.0, rs.LATENCY_S)):
        with rs.StandIns(config, latency_scale=scale) as running:
            url = running.endpoint_map()["stand_ins"][0]["url"]
            start = time.perf_counter()
            answer = requests.post(f"{url}/chat/completions", json=body, timeout=10).json()
            took = time.perf_counter() - start
        assert at_least <= took < at_most and answer["usage"]["completion_tokens"] <= 20


def test_cli_map_overlay_and_counts(tmp_path):
    """The script run as a user runs it: it writes the endpoint map, an overlay that points every role
    at its stand-in when merged over the recipe, and the counts file; SIGTERM stops it."""
    overlay_recipe = tmp_path / "recipe.yaml"
    overlay_recipe.write_text(yaml.safe_dump({
        "llm": {"backend": "openai", "model": "gpt-4o", "openai": {"base_url": "https://api.openai.com/v1", "api_key_env": "OPENAI_API_KEY"}},
        "mavis": {"filter_visual_dependency": {"answerers": [{"name": "a", "llm": {}},
                                                             {"name": "b", "llm": {"model": "phi", "openai": {"base_url": "http://localhost:8003/v1",
                                                                                                              "api_key_env": None}}}]}},
        "eval_mcitebench": {"models": [{"name": "v", "llm": {"backend": "vllm", "model": "Qwen/Qwen2.5-VL-7B-Instruct"}}]},
    }))
    files = {name: tmp_path / f"{name}.out" for name in ("map", "overlay", "counts")}
    configs = [CONFIGS[0], str(overlay_recipe)]
    process = subprocess.Popen([sys.executable, str(REPO / "scripts" / "rehearsal_servers.py"), *[f"--configfile={c}" for c in configs],
                                "--latency-scale=0", "--serve-in-process", f"--map-out={files['map']}", f"--overlay-out={files['overlay']}",
                                f"--counts-out={files['counts']}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):
            if files["overlay"].exists() or process.poll() is not None:
                break
            time.sleep(0.1)
        assert files["overlay"].exists(), process.stderr.read() if process.poll() is not None else "no map after 30 s"
        endpoint_map = json.loads(files["map"].read_text())
        assert endpoint_map["env"] == {"OPENAI_API_KEY": "rehearsal-OPENAI_API_KEY"}
        merged = rs.load_recipe([*configs, str(files["overlay"])])
        for entry in endpoint_map["roles"]:
            assert entry["stand_in"], entry
        pointed = {r.path: r for r in rs.find_roles(merged)}
        for entry in endpoint_map["roles"]:  # every role of the merged recipe now calls its own stand-in, with the recipe's model
            assert pointed[entry["path"]].settings["openai"]["base_url"] == entry["stand_in"]
            assert pointed[entry["path"]].model == entry["model"] and pointed[entry["path"]].backend == "openai"
        phi = next(e["stand_in"] for e in endpoint_map["roles"] if e["model"] == "phi")
        reply = requests.post(f"{phi}/chat/completions", json={"model": "phi", "messages": [{"role": "user", "content": "Hello there."}]}, timeout=10)
        assert reply.status_code == 200
        counts = json.loads(files["counts"].read_text())
        assert counts[phi]["models"] == {"phi": {"(unrecognised)": 1}} and counts[phi]["recipe"] == "http://localhost:8003/v1"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0


def test_json_answers_that_point_into_the_request_read_it():
    """MCiteBench's explanation triples take the response sentence that cites the paper; M2RAG's
    placements take a segment and an image the request shows (random numbers would all be invalid)."""
    library = rs.Prompts()

    def text(name, variables):
        return "\n".join(m["content"] for m in library.prompts[name].render(variables))

    request = text("mcitebench_explanation_qa", {"question": "Why is the baseline weaker?", "max_triples": 3, "response": (
        "[1] We thank the reviewer.\n[2] Figure 1 and Table 3 compare them.\n[3] The baseline lacks pretraining, as Table 2 shows.")})
    for seed in range(20):
        value = json.loads(rs.answer_text("mcitebench_explanation_qa", "json", {}, request, rs.Seeded(bytes([seed])), library))
        spans = [(t["answer_from"], t["answer_to"], t["evidence"], t["valid"]) for t in value["triples"]]
        assert spans in ([(3, 3, "Table 2", True)], [(3, 3, "Table 2", True), (2, 2, "Figure 1, Table 3", True)])  # one source first
    request = text("m2rag_interleave", {"query": "Why is the sky blue?", "segments": ["Light scatters.", "Blue scatters most."],
                                        "images": [{"n": 1, "slot": "", "caption": "a sky"}, {"n": 3, "slot": "", "caption": "a prism"}]})
    for seed in range(20):
        value = json.loads(rs.answer_text("m2rag_interleave", "json", {}, request, rs.Seeded(bytes([seed])), library))
        assert all(p["segment"] in (1, 2) and set(p["images"]) <= {1, 3} for p in value["placements"]) and value["placements"]
