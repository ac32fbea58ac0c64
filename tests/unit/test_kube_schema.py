"""Every Kubernetes manifest the project ships (deploy/kubernetes/) and the arms' manifests the
launcher would apply validate against the OpenAPI schema of a current Kubernetes (kubernetes-validate,
strict: an unknown field is an error, as `kubectl apply --validate=strict` makes it). The control: a
misspelt field is caught."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from advisor.experiments.arms.kube_clone import manifests_yaml
from tests.unit.test_kube_clone import arms

ROOT = Path(__file__).resolve().parents[2]
VERSION = "1.37"  # the newest schema kubernetes-validate ships (1.37.0)


def valid(obj: dict) -> None:
    kubernetes_validate.validate(obj, VERSION, strict=True)


@pytest.mark.parametrize("path", sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_manifests_validate(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert docs
    for d in docs:
        valid(d)


def test_the_arms_manifests_from_the_plan_validate():
    for d in yaml.safe_load_all(manifests_yaml(arms())):
        valid(d)


def test_a_misspelt_field_is_caught():
    bad = arms()["candidate"]
    bad["spec"]["template"]["spec"]["containers"][0]["argz"] = bad["spec"]["template"]["spec"]["containers"][0].pop("args")
    with pytest.raises(kubernetes_validate.ValidationError):
        valid(bad)
