"""The dashboard's security and escaping, through FastAPI's TestClient (an in-process HTTP client):
tokens, cross-site requests, the advisor.yaml allowlist, untrusted text, no stack traces."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from advisor.fleet.config import FleetConfig
from advisor.store import open_store
from advisor.web import ServeError, create_app
from tests.unit.test_store import make_diagnosis, make_snapshot
from tests.unit.test_capacity_history import result as capacity_result
from tests.unit.test_store_experiments import make_result

EVIL = "<script>alert('x')</script>"
TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def hostile_store(tmp_path, text: str) -> str:
    """A store holding one diagnosis and one experiment whose target-given text is `text`."""
    url = f"sqlite:///{tmp_path / 'advisor.db'}"
    with open_store(url) as store:
        d = make_diagnosis()
        d.model = text
        d.findings[0].evidence[0].text = f"model label {text}"
        d.findings[0].checks[0].title = f"rule text {text}"
        store.save_diagnosis(d, make_snapshot(), deployment="local")
        ident = store.start_experiment("exp-1", "local", "http://h:1", "max_num_seqs", text, {"lines": [text]})
        store.finish_experiment(ident, make_result("exp-1"))
        cap = capacity_result(2.5, 3.5, 3.0)
        cap.model, cap.workload, cap.notes = text, text, [f"note {text}"]
        store.save_capacity(cap, deployment="local")
    return url


@pytest.fixture
def store_url(tmp_path) -> str:
    return hostile_store(tmp_path, EVIL)


def config(tmp_path, prom_url="http://127.0.0.1:9") -> FleetConfig:
    spec = tmp_path / "dep.yaml"
    spec.write_text("name: local\nengine: vllm\nmodel: tiny\nlauncher: endpoints\n"
                    "endpoints: {baseline: 'http://127.0.0.1:9', candidate: 'http://127.0.0.1:10'}\n")
    return FleetConfig.model_validate({"deployments": [{"name": "local", "prom_url": prom_url, "deployment": spec}]})


def client(tmp_path, store_url, token=TOKEN, host="127.0.0.1") -> TestClient:
    app = create_app(config(tmp_path), store_url=store_url, token=token, host=host, log_dir=tmp_path / "logs")
    return TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1")


def diagnoses(store_url) -> int:
    with open_store(store_url) as store:
        return len(store.list_diagnoses())


def test_pages_show_untrusted_text_as_text(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        for path in ("/", "/deployments/local", "/diagnoses/1", "/diagnoses/1/report.html", "/experiments/1",
                     "/experiments/1/report.html", "/rules", "/rules/ADV001", "/api/diagnoses/1", "/api/experiments/1", "/capacity/1",
                     "/api/deployments/local/capacity"):
            r = c.get(path)
            assert r.status_code == 200, (path, r.text[:300])
            assert EVIL not in r.text, path
        page = c.get("/diagnoses/1").text
        assert "&lt;script&gt;" in page and "Prove it" in page
        assert c.get("/diagnoses/1/report.html").headers["content-disposition"].startswith("attachment")


def test_actions_need_the_token_and_change_nothing_without_it(tmp_path, store_url):
    before = diagnoses(store_url)
    with client(tmp_path, store_url) as c:
        url = "/api/deployments/local/diagnoses"
        assert c.post(url).status_code == 401
        assert c.post(url, headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert c.post(url, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert c.post("/api/deployments/local/experiments", json={"mechanism": "max_num_seqs"}).status_code == 401
    assert diagnoses(store_url) == before


def test_cross_site_requests_are_refused_even_with_the_token(tmp_path, store_url):
    before = diagnoses(store_url)
    with client(tmp_path, store_url) as c:
        url = "/api/deployments/local/diagnoses"
        # What a form on another site would send (it cannot add the Authorization header anyway).
        form = c.post(url, data={"x": "1"}, headers={"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"})
        assert form.status_code == 403
        assert c.post(url, headers={**AUTH, "Origin": "http://evil.example"}).status_code == 403
        assert c.post(url, headers={**AUTH, "Sec-Fetch-Site": "cross-site"}).status_code == 403
        assert c.post(url, headers={**AUTH, "Origin": "null"}).status_code == 403
    assert diagnoses(store_url) == before


def test_without_a_token_actions_are_disabled_and_say_so(tmp_path, store_url):
    with client(tmp_path, store_url, token=None) as c:
        r = c.post("/api/deployments/local/diagnoses", headers=AUTH)
        assert r.status_code == 403 and "ADVISOR_API_TOKEN" in r.json()["detail"]
        assert "Actions are disabled" in c.get("/").text
        assert "Prove it" not in c.get("/diagnoses/1").text


def test_only_deployments_in_the_config_are_touched(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        assert c.post("/api/deployments/elsewhere/diagnoses", headers=AUTH).status_code == 404
        assert c.get("/api/deployments/elsewhere/diagnoses").status_code == 404
        assert c.get("/deployments/elsewhere").status_code == 404
        # No endpoint takes a Prometheus URL: one in the query is ignored, the configured one is read
        # (here unreachable, so the run fails with 502 and names only the configured URL).
        r = c.post("/api/deployments/local/diagnoses?prom_url=http://evil.example:9090", headers=AUTH)
        assert r.status_code == 502 and "evil" not in r.text and "127.0.0.1:9" in r.json()["detail"]
        assert [d["name"] for d in c.get("/api/deployments").json()] == ["local"]


def test_beyond_loopback_needs_a_token_to_start_and_to_read(tmp_path, store_url):
    with pytest.raises(ServeError, match="without ADVISOR_API_TOKEN"):
        create_app(config(tmp_path), store_url=store_url, token=None, host="0.0.0.0")
    with client(tmp_path, store_url, host="0.0.0.0") as c:
        assert c.get("/").status_code == 401
        assert c.get("/api/deployments").status_code == 401
        assert c.get("/", headers=AUTH).status_code == 200
        assert c.post("/login", json={"token": "wrong"}).status_code == 403
        assert c.post("/login", json={"token": TOKEN}).status_code == 204
        assert c.get("/").status_code == 200, "the login cookie lets the browser read"


def test_no_stack_trace_reaches_a_page(tmp_path, store_url, monkeypatch):
    from advisor.store import Store

    def boom(*a, **k):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(Store, "list_diagnoses", boom)
    with client(tmp_path, store_url) as c:
        for path in ("/", "/api/deployments"):
            r = c.get(path)
            assert r.status_code == 500
            assert "secret internals" not in r.text and "Traceback" not in r.text


def test_unknown_ids_are_404(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        assert c.get("/diagnoses/999").status_code == 404
        assert c.get("/api/experiments/999").status_code == 404
        assert c.get("/rules/ADV999").status_code == 404


def test_openapi_lists_the_paths_scripts_rely_on(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        paths = c.get("/openapi.json").json()["paths"]
    for path in ("/api/deployments", "/api/deployments/{name}/diagnoses", "/api/deployments/{name}/experiments",
                 "/api/diagnoses/{diagnosis_id}", "/api/experiments/{experiment_id}"):
        assert path in paths
    assert "post" in paths["/api/deployments/{name}/diagnoses"]


def test_a_rebound_host_name_gets_nothing_on_loopback(tmp_path, store_url):
    """DNS rebinding: another site's name resolving to 127.0.0.1 must not read the dashboard."""
    with client(tmp_path, store_url) as c:
        assert c.get("/api/deployments", headers={"Host": "evil.example"}).status_code == 400
        assert c.get("/api/deployments", headers={"Host": "localhost:8080"}).status_code == 200


def test_experiments_of_deployments_not_in_the_config_are_not_shown(tmp_path, store_url):
    with open_store(store_url) as store:
        other = store.start_experiment("exp-2", "secret-other", "http://h:1", "max_num_seqs", "8", {})
    with client(tmp_path, store_url) as c:
        assert c.get("/api/experiments/1").json()["watched"] == "local"
        assert c.get(f"/api/experiments/{other}").status_code == 404
        assert c.get(f"/experiments/{other}").status_code == 404
        r = c.post("/api/deployments/local/experiments/preview", json={"diagnosis_id": 999, "rank": 1}, headers=AUTH)
        assert r.status_code == 404 and "advisor.db" not in r.text


def test_the_weekly_page_caps_its_period(tmp_path, store_url):
    with client(tmp_path, store_url) as c:
        r = c.get("/reports/weekly?since=3650d")
        assert r.status_code == 422 and "at most 31d" in r.text
        assert c.get("/reports/weekly?since=99999999d").status_code == 422


def test_prom_url_credentials_never_show(tmp_path):
    from advisor.app.watched import ExperimentRuns
    from advisor.fleet.config import load_config

    (tmp_path / "advisor.yaml").write_text("deployments: [{name: a, prom_url: 'http://user:pw123@127.0.0.1:9'}]\n")
    cfg = load_config(tmp_path / "advisor.yaml")
    assert cfg.deployments[0].prom_url == "http://127.0.0.1:9"
    env = ExperimentRuns("sqlite://", tmp_path)._env(cfg.deployments[0])
    assert (env["ADVISOR_PROM_USER"], env["ADVISOR_PROM_PASSWORD"]) == ("user", "pw123")
    url = f"sqlite:///{tmp_path / 'a.db'}"
    app = create_app(cfg, store_url=url, token=TOKEN, log_dir=tmp_path)
    with TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1") as c:
        for path in ("/", "/api/deployments", "/deployments/a"):
            assert "pw123" not in c.get(path).text
        r = c.post("/api/deployments/a/diagnoses", headers=AUTH)
        assert r.status_code == 502 and "pw123" not in r.text
