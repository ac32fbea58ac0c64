"""What a target serves, asked before a load is planned: its model, and that model's context window."""

from __future__ import annotations

from advisor.errors import AdvisorError
from advisor.loadgen.execute import LoadError
from probes.http import HttpConfig, request
from probes.http import client as http_client


def model_of(target: str, http: HttpConfig) -> str:
    """The target's first served model, asked within one request deadline; LoadError in one line."""
    try:
        with http_client(http) as c:
            r = request(c, "GET", target.rstrip("/") + "/v1/models", what="engine")
        if r.status_code != 200:
            raise LoadError(f"{target}/v1/models answered HTTP {r.status_code}: give --model")
        return r.json()["data"][0]["id"]
    except LoadError:
        raise
    except AdvisorError as e:
        raise LoadError(f"{e}; or give --model") from None
    except (ValueError, KeyError, IndexError, TypeError):
        raise LoadError(f"{target}/v1/models lists no model: give --model") from None


def context_of(target: str, model: str, http: HttpConfig) -> int | None:
    """The served model's context window (vLLM's max_model_len in /v1/models), or None when the
    target does not say: the check it feeds is then skipped, never a reason to stop."""
    try:
        with http_client(http) as c:
            r = request(c, "GET", target.rstrip("/") + "/v1/models", what="engine")
        data = r.json().get("data") if r.status_code == 200 else None
    except (AdvisorError, ValueError, AttributeError):
        return None
    for m in data if isinstance(data, list) else []:
        n = m.get("max_model_len") if isinstance(m, dict) else None
        if isinstance(n, int) and not isinstance(n, bool) and n > 0 and m.get("id") in (model, None):
            return n
    return None
