"""PromptSizer against a stand-in /tokenize (httpx.MockTransport) whose tokens are whitespace words,
with variants for a BOS token, multi-token words, a chat template and a tokenizer that is not
additive; plus prefix identity, nonce uniqueness, determinism and the number of /tokenize calls."""

import json
import re
import sys
import types
from itertools import combinations

import httpx
import pytest

from advisor.workload.plan import PlannedRequest, plan
from advisor.workload.prompts import TOLERANCE_TOKENS, PromptSizer, PromptSizingError
from advisor.workload.spec import Workload

URL = "http://engine.test"


def words_tokenizer(bos=0, long_words_cost=1, chat_overhead=5, drift_every=0):
    """count = BOS + words, a word longer than 6 letters costing long_words_cost; drift_every adds a
    token per that many words (a tokenizer whose counts do not add up word by word)."""

    def count(text: str) -> int:
        ws = text.split()
        n = sum(long_words_cost if len(w) > 6 else 1 for w in ws)
        return bos + n + (len(ws) // drift_every if drift_every else 0)

    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/tokenize":
            return httpx.Response(404, json={"detail": "Not Found"})
        body = json.loads(request.content)
        if body.get("model") != "m":
            return httpx.Response(404, json={"error": {"message": f"The model `{body.get('model')}` does not exist."}})
        seen.append(body)
        if "messages" in body:
            return httpx.Response(200, json={"count": count(body["messages"][0]["content"]) + chat_overhead})
        n = count(body["prompt"])
        return httpx.Response(200, json={"count": n, "tokens": list(range(n)), "max_model_len": 4096})

    return httpx.MockTransport(handler), seen


def workload(**kw) -> Workload:
    base = {"buckets": [{"prompt_tokens": [40, 900], "output_tokens": 8}],
            "prefix": {"groups": 3, "tokens": 30, "share": 0.5},
            "arrival": {"kind": "poisson", "rate": 5}, "requests": 300, "seed": 11}
    return Workload.model_validate({**base, **kw})


def sizer(**kw) -> tuple[PromptSizer, list]:
    transport, seen = words_tokenizer(**kw)
    return PromptSizer.for_target(URL, "m", transport=transport), seen


def common_words(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a.split(), b.split()):
        if x != y:
            break
        n += 1
    return n


@pytest.mark.parametrize("kw", [{}, {"bos": 1}, {"long_words_cost": 3}])
def test_every_prompt_has_its_exact_size(kw):
    s, seen = sizer(**kw)
    w = workload()
    reqs = plan(w)
    prompts = s.prompts_for(reqs, w)
    count, _ = words_tokenizer(**kw)
    assert set(prompts) == {r.index for r in reqs}
    bos = kw.get("bos", 0)
    cost = kw.get("long_words_cost", 1)
    for r in reqs:
        assert bos + sum(cost if len(x) > 6 else 1 for x in prompts[r.index].split()) == r.prompt_tokens
    assert s.stats.prompts == len(reqs) and s.stats.exact == len(reqs) and not s.stats.misses
    # One count per prompt, a few per prefix group, and a bounded calibration.
    assert s.calls == len(seen) <= len(reqs) + 3 + 50


def test_prefix_identity_and_uniqueness():
    s, _ = sizer()
    w = workload()
    reqs = plan(w)
    prompts = s.prompts_for(reqs, w)
    P = w.prefix.tokens
    by_group = {}
    for r in reqs:
        by_group.setdefault(r.prefix_group, []).append(prompts[r.index])
    assert set(by_group) == {None, 0, 1, 2}
    heads = {g: {" ".join(p.split()[:P]) for p in ps} for g, ps in by_group.items() if g is not None}
    assert all(len(h) == 1 for h in heads.values()), "a group's prompts share one prefix"
    assert len({next(iter(h)) for h in heads.values()}) == 3, "groups have different prefixes"
    # Past the prefix, prompts of one group part within their 2-word nonce; prompts of different
    # groups, or of none, never have a 16-token KV block (vLLM's GPU default) in common.
    group_of = {r.index: r.prefix_group for r in reqs}
    for (i, a), (j, b) in combinations(prompts.items(), 2):
        same = group_of[i] is not None and group_of[i] == group_of[j]
        assert common_words(a, b) < (P + 2 if same else 16)
    assert len(set(prompts.values())) == len(prompts)


def test_deterministic_per_seed_and_salt():
    w = workload()
    reqs = plan(w)
    first = sizer()[0].prompts_for(reqs, w)
    assert sizer()[0].prompts_for(reqs, w) == first
    other_seed = sizer()[0].prompts_for(reqs, w.model_copy(update={"seed": 12}))
    salted = sizer()[0].prompts_for(reqs, w, salt="arm-b")
    for other in (other_seed, salted):
        assert all(other[i] != first[i] for i in first)
        assert all(len(other[i].split()) == len(first[i].split()) for i in first)


def test_chat_counts_include_the_template():
    s, seen = sizer(chat_overhead=7)
    w = workload(api="chat")
    reqs = plan(w)[:50]
    prompts = s.prompts_for(reqs, w)
    assert all("messages" in b for b in seen[1:])  # the first asks whether /tokenize exists
    assert all(len(prompts[r.index].split()) + 7 == r.prompt_tokens for r in reqs)


def test_a_tokenizer_that_does_not_add_up_still_converges():
    s, _ = sizer(drift_every=40)
    w = workload(prefix=None)
    reqs = plan(w)[:100]
    prompts = s.prompts_for(reqs, w)
    count = lambda t: len(t.split()) + len(t.split()) // 40  # noqa: E731
    errors = [count(prompts[r.index]) - r.prompt_tokens for r in reqs]
    assert max(map(abs, errors)) <= TOLERANCE_TOKENS
    assert s.stats.max_abs_error == max(map(abs, errors)) and not s.stats.misses


def test_sampled_verification_counts_less_and_stays_exact():
    transport, seen = words_tokenizer()
    s = PromptSizer.for_target(URL, "m", transport=transport, verify="sample")
    w = workload(requests=600)
    reqs = plan(w)
    prompts = s.prompts_for(reqs, w)
    assert all(len(prompts[r.index].split()) == r.prompt_tokens for r in reqs)
    assert s.calls < 150 and s.stats.unverified > 400


def test_the_summary_line_says_what_was_counted_and_what_was_trusted():
    transport, _ = words_tokenizer()
    s = PromptSizer.for_target(URL, "m", transport=transport, verify="sample")
    s.prompts_for(plan(workload(requests=600)), workload(requests=600))
    line = s.summary()
    assert line.startswith(f"600 prompts sized by {URL}/tokenize (model m): {s.calls:,} counts, every counted one exact; ")
    assert f"{s.stats.unverified:,} predicted like the counted ones around them" in line
    every, _ = sizer()
    every.prompts_for(plan(workload(requests=50)), workload(requests=50))
    assert every.summary().endswith(f"{every.calls:,} counts, every counted one exact"), "nothing trusted"


def test_sampled_verification_recounts_when_a_prediction_fails():
    s, _ = sizer(drift_every=200)  # additive below 200 words, off by one above
    s.verify = "sample"
    w = workload(prefix=None, buckets=[{"prompt_tokens": [40, 190], "output_tokens": 8}], requests=80)
    long_ = [PlannedRequest(80, None, "x", 450, 8, None, None)]
    prompts = s.prompts_for(plan(w) + long_, w)
    assert s.stats.unverified == 0, "the miss made every trusted prompt be counted"
    assert len(prompts[80].split()) + len(prompts[80].split()) // 200 == 450


def test_trace_prefix_lengths_per_group():
    s, _ = sizer()
    w = workload(prefix={"groups": 2, "tokens": 10, "share": 1.0})
    reqs = [PlannedRequest(i, float(i), "x", 200, 8, i % 2, None) for i in range(6)]
    prompts = s.prompts_for(reqs, w, prefix_tokens={0: 120, 1: 40})
    assert common_words(prompts[0], prompts[2]) >= 120 and common_words(prompts[1], prompts[3]) >= 40
    assert common_words(prompts[1], prompts[3]) < 120


def test_unknown_model_and_no_tokenize():
    transport, _ = words_tokenizer()
    with pytest.raises(PromptSizingError, match="does not exist"):
        PromptSizer.for_target(URL, "other", transport=transport)
    nothing = httpx.MockTransport(lambda r: httpx.Response(404, json={"detail": "Not Found"}))
    with pytest.raises(PromptSizingError, match="has no /tokenize.*set `tokenizer:`"):
        PromptSizer.for_target(URL, "m", transport=nothing)
    down = httpx.MockTransport(lambda r: (_ for _ in ()).throw(httpx.ConnectError("refused")))
    with pytest.raises(PromptSizingError, match="unreachable"):
        PromptSizer.for_target(URL, "m", transport=down)


def test_named_tokenizer_when_the_target_has_no_tokenize(monkeypatch):
    class FakeTokenizer:
        def __call__(self, text):
            return {"input_ids": [1] + list(range(len(text.split())))}  # a BOS, then words

    fake = types.ModuleType("transformers")
    fake.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda name: FakeTokenizer())
    monkeypatch.setitem(sys.modules, "transformers", fake)
    nothing = httpx.MockTransport(lambda r: httpx.Response(404, json={"detail": "Not Found"}))
    s = PromptSizer.for_target(URL, "m", tokenizer="org/some-model", transport=nothing)
    assert s.source == "tokenizer org/some-model"
    w = workload(prefix=None)
    reqs = plan(w)[:40]
    prompts = s.prompts_for(reqs, w)
    assert all(1 + len(prompts[r.index].split()) == r.prompt_tokens for r in reqs)


def test_missing_tokenizer_libraries_give_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(PromptSizingError, match="neither transformers nor tokenizers is installed"):
        PromptSizer.from_tokenizer("org/some-model")


def test_a_tokenizer_without_one_token_words_is_refused():
    s, _ = sizer(long_words_cost=2)
    s._count_fn = lambda text, api: 2 * len(text.split())
    with pytest.raises(PromptSizingError, match="common words are one token"):
        s.prompts_for(plan(workload())[:5], workload())


def vocabulary_tokenizer(kind: str):
    """A stand-in /tokenize and /detokenize for a tokenizer without whole-word tokens.

    chars: one token per character. pieces: text split before each space, then each piece taken
    greedily two characters at a time when the pair is in a small vocabulary (as a BPE that merges
    at most two characters), else one; so no common word of three or more letters is one token."""
    pairs = {" m", " s", " t", " a", " p", " q", " c", " b", " d", " r", " l", " k", " g", " i", " o", " f",
             "he", "er", "es", "de", "en", "ok", "in", "on", "at", "ch", "ue", "re"}
    vocab: dict[str, int] = {}

    def tokens(text: str) -> list[str]:
        if kind == "chars":
            return list(text)
        out = []
        for piece in re.findall(r" ?[^ ]+| +", text):
            i = 0
            while i < len(piece):
                step = 2 if piece[i:i + 2] in pairs else 1
                out.append(piece[i:i + step])
                i += step
        return out

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path == "/tokenize":
            ids = [vocab.setdefault(t, len(vocab)) for t in tokens(body["prompt"])]
            return httpx.Response(200, json={"count": len(ids), "tokens": ids, "max_model_len": 4096})
        if request.url.path == "/detokenize":
            by_id = {i: t for t, i in vocab.items()}
            return httpx.Response(200, json={"prompt": "".join(by_id[i] for i in body["tokens"])})
        return httpx.Response(404, json={"detail": "Not Found"})

    return httpx.MockTransport(handler), tokens


@pytest.mark.parametrize("kind", ["chars", "pieces"])
def test_a_tokenizer_without_whole_words_is_sized_from_its_own_vocabulary(kind):
    transport, tokens = vocabulary_tokenizer(kind)
    s = PromptSizer.for_target(URL, "m", transport=transport)
    w = workload(requests=120)
    reqs = plan(w)
    prompts = s.prompts_for(reqs, w)
    errors = [len(tokens(prompts[r.index])) - r.prompt_tokens for r in reqs]
    assert max(map(abs, errors)) <= TOLERANCE_TOKENS
    assert s._cal["completions"].kind == "pieces"
    # These two add up piece by piece, so every prompt is exact on its first count.
    assert errors == [0] * len(reqs) and s.calls <= len(reqs) + 3 + 2 * 50 + 96
    if kind == "pieces":
        assert all(u.startswith(" ") for u in s._cal["completions"].units), "space-led pieces are preferred"
    groups: dict = {}
    for r in reqs:
        if r.prefix_group is not None:
            groups.setdefault(r.prefix_group, []).append(prompts[r.index])
    for texts in groups.values():  # a group's prompts begin with one text of the prefix's tokens
        assert len({"".join(tokens(t)[:w.prefix.tokens]) for t in texts}) == 1
    assert len(set(prompts.values())) == len(prompts)


def llama_server_tokenizer(bos=1):
    """llama-server's /tokenize: {"content", "add_special"} -> {"tokens"}; a body it does not read
    (vLLM's {"model", "prompt"}) gives an empty list, and a chat is rendered by /apply-template."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append((request.url.path, body))
        if request.url.path == "/apply-template":
            return httpx.Response(200, json={"prompt": "<|user|>\n" + body["messages"][0]["content"] + "\n"})
        if request.url.path == "/tokenize":
            words = body.get("content", "").split()
            return httpx.Response(200, json={"tokens": [1] * ((bos if body.get("add_special") else 0) + len(words))})
        return httpx.Response(404, json={"error": {"code": 404, "message": "File Not Found"}})

    return httpx.MockTransport(handler), seen


def test_llama_servers_tokenize_dialect_is_found_at_the_first_count_and_kept():
    transport, seen = llama_server_tokenizer()
    s = PromptSizer.for_target(URL, "m", transport=transport)
    w = workload(prefix=None)
    reqs = plan(w)[:20]
    prompts = s.prompts_for(reqs, w)
    for r in reqs:
        assert 1 + len(prompts[r.index].split()) == r.prompt_tokens  # BOS, as the server adds it
    bodies = [b for path, b in seen if path == "/tokenize"]
    assert "prompt" in bodies[0] and all("content" in b for b in bodies[2:])
    assert sum("prompt" in b for b in bodies) == 1, "the vLLM form is tried once, not per prompt"


def test_llama_server_chat_prompts_are_counted_through_its_template():
    transport, seen = llama_server_tokenizer()
    s = PromptSizer.for_target(URL, "m", transport=transport)
    w = workload(prefix=None, api="chat")
    reqs = plan(w)[:5]
    prompts = s.prompts_for(reqs, w)
    assert any(path == "/apply-template" for path, _ in seen)
    for r in reqs:
        # "<|user|>" is one more word, and the BOS
        assert 2 + len(prompts[r.index].split()) == r.prompt_tokens
