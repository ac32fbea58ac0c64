"""`advisor deployment import k8s://...`: the reference parsed, the engine container and its engine
told from the image and command; against a live API stand-in in tests/integration/test_kube_launcher.py."""

from __future__ import annotations

import pytest

from advisor.app.kube_import import KubeImportError, Reference, engine_of


@pytest.mark.parametrize("text, want", [
    ("k8s://llm/deployment/vllm-llama", Reference("llm", "deployment", "vllm-llama")),
    ("k8s://default/statefulsets/sgl", Reference("default", "statefulset", "sgl")),
])
def test_a_reference_names_namespace_kind_and_name(text, want):
    assert Reference.parse(text) == want


@pytest.mark.parametrize("text", ["vllm", "k8s://llm/inferenceservice/x", "k8s://LLM/deployment/x",
                                  "http://llm/deployment/x", "k8s://llm/deployment/"])
def test_anything_else_is_one_line_naming_the_form(text):
    with pytest.raises(KubeImportError, match="k8s://NAMESPACE/deployment/NAME"):
        Reference.parse(text)


@pytest.mark.parametrize("container, engine", [
    ({"image": "vllm/vllm-openai:v0.11.0"}, "vllm"),
    ({"image": "lmsysorg/sglang:v0.5.3-cu126"}, "sglang"),
    ({"image": "ghcr.io/huggingface/text-generation-inference:3.3"}, "tgi"),
    ({"image": "ghcr.io/ggml-org/llama.cpp:server"}, "llamacpp"),
    ({"image": "registry.local/serving:1", "command": ["python3", "-m", "vllm.entrypoints.openai.api_server"]}, "vllm"),
    ({"image": "envoyproxy/envoy:v1.31"}, None),
])
def test_the_engine_is_told_from_the_image_and_the_command(container, engine):
    assert engine_of(container) == engine
