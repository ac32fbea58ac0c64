"""The advisor's HTTP settings: from ADVISOR_ settings and the command line's global options to one
`probes.http.HttpConfig` per kind of target (Prometheus, engine).

- TLS is verified unless `--insecure` or ADVISOR_TLS_VERIFY=false (which the command line warns
  about on every run); `--ca-bundle` / ADVISOR_CA_BUNDLE names the CAs to trust instead of the default.
- Credentials: `user:password@` in a URL given on the command line is split off at that boundary
  (`target()`), so only the credential-free URL travels further and can be printed, logged or
  stored; else they come from the environment or a file: ADVISOR_PROM_USER with
  ADVISOR_PROM_PASSWORD or ADVISOR_PROM_PASSWORD_FILE (basic), ADVISOR_PROM_TOKEN or
  ADVISOR_PROM_TOKEN_FILE (bearer), and the same with ADVISOR_ENGINE_ for engines.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from advisor.errors import AdvisorError
from advisor.inputs import open_input  # a FIFO or a device is refused, not read until it ends
from advisor.settings import get_settings
from probes.redaction import redact_url  # noqa: F401  (re-exported)

if TYPE_CHECKING:  # the HTTP stack is loaded where a request is configured, not at every start-up
    from probes.http import Auth, HttpConfig

Role = Literal["prom", "engine"]
ROLE_NAME = {"prom": "Prometheus", "engine": "engine"}

from advisor.option_help import ENGINE_CREDENTIALS_HELP, PROM_CREDENTIALS_HELP  # noqa: E402,F401  (re-exported)


class CredentialsError(AdvisorError):
    pass


_cli: dict = {}  # the command line's global options: insecure, ca_bundle
# Credentials split off URLs given on the command line, by origin (scheme://host:port): code deep
# down that gets the credential-free URL back (a diagnosis' target, an experiment's arm) sends
# them to that origin again, and to no other.
_by_origin: dict[str, Auth] = {}


def set_tls_options(insecure: bool = False, ca_bundle: Path | None = None) -> None:
    """Called by the command line's callback; these override the settings."""
    _cli.clear()
    if insecure:
        _cli["verify"] = False
    if ca_bundle is not None:
        _cli["ca_bundle"] = ca_bundle


def tls_verify() -> bool:
    return _cli.get("verify", get_settings().tls_verify)


def ca_bundle() -> Path | None:
    return _cli.get("ca_bundle", get_settings().ca_bundle)


def insecure_warning() -> str | None:
    """The line every run prints while verification is off."""
    if tls_verify():
        return None
    how = "--insecure" if _cli.get("verify") is False else "ADVISOR_TLS_VERIFY=false"
    return (f"warning: TLS certificates are not verified ({how}): anyone on the path can read and change "
            "what is sent, credentials included")


def check_tls() -> None:
    """Fail before anything starts when the CA bundle cannot be used."""
    if tls_verify() and ca_bundle() is not None:
        from probes.http import HttpConfig, TlsConfigError, ssl_context

        try:
            ssl_context(HttpConfig(verify=True, ca_bundle=ca_bundle()))
        except TlsConfigError as e:
            raise AdvisorError(f"{e} (from {'--ca-bundle' if 'ca_bundle' in _cli else 'ADVISOR_CA_BUNDLE'})") from None


MAX_SECRET_BYTES = 64 * 1024


def _read_secret(path: Path, var: str) -> str:
    try:
        with open_input(Path(path), CredentialsError, limit=MAX_SECRET_BYTES, where=f"{var} {path}") as f:
            data = f.read(MAX_SECRET_BYTES + 1)
        if len(data) > MAX_SECRET_BYTES:
            raise CredentialsError(f"{var} {path}: more than {MAX_SECRET_BYTES // 1024} KiB; "
                                   "expected one line holding the secret")
        text = data.decode("utf-8")
    except OSError as e:
        raise CredentialsError(f"{var} {path}: cannot read: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise CredentialsError(f"{var} {path}: not UTF-8 text") from None
    secret = text.rstrip("\r\n")
    if not secret or "\n" in secret:
        raise CredentialsError(f"{var} {path}: expected one line holding the secret")
    return secret


def env_auth(role: Role) -> Auth | None:
    """Credentials for `role` from the environment (or the files it names)."""
    from probes.http import BasicAuth, BearerAuth

    s = get_settings()
    p = role.upper()
    user = getattr(s, f"{role}_user")
    password = getattr(s, f"{role}_password")
    password_file = getattr(s, f"{role}_password_file")
    token = getattr(s, f"{role}_token")
    token_file = getattr(s, f"{role}_token_file")
    if password is not None and password_file is not None:
        raise CredentialsError(f"give ADVISOR_{p}_PASSWORD or ADVISOR_{p}_PASSWORD_FILE, not both")
    if token is not None and token_file is not None:
        raise CredentialsError(f"give ADVISOR_{p}_TOKEN or ADVISOR_{p}_TOKEN_FILE, not both")
    basic = user is not None or password is not None or password_file is not None
    bearer = token is not None or token_file is not None
    if basic and bearer:
        raise CredentialsError(f"give a bearer token (ADVISOR_{p}_TOKEN...) or basic auth (ADVISOR_{p}_USER...), not both")
    if bearer:
        value = token.get_secret_value() if token is not None else _read_secret(token_file, f"ADVISOR_{p}_TOKEN_FILE")
        return BearerAuth(value)
    if basic:
        if user is None:
            raise CredentialsError(f"ADVISOR_{p}_PASSWORD needs ADVISOR_{p}_USER")
        value = (password.get_secret_value() if password is not None else
                 _read_secret(password_file, f"ADVISOR_{p}_PASSWORD_FILE") if password_file is not None else "")
        return BasicAuth(user, value)
    return None


def config(role: Role, timeout: float | None = None, auth: Auth | None = None, url: str | None = None) -> HttpConfig:
    """How the advisor talks to a target of this role: TLS from the settings and options; the
    given credentials, else those given on the command line for url's origin, else the role's
    from the environment; and the request deadline."""
    from probes.http import HttpConfig, origin

    if auth is None and url is not None:
        auth = _by_origin.get(origin(url))
    s = get_settings()
    return HttpConfig(verify=tls_verify(), ca_bundle=ca_bundle(),
                      auth=auth if auth is not None else env_auth(role),
                      timeout=timeout if timeout is not None else s.timeout,
                      max_series=s.max_series, max_metrics_lines=s.max_metrics_lines,
                      max_metrics_bytes=s.max_metrics_bytes)


def target(url: str, role: Role, option: str, timeout: float | None = None) -> tuple[str, HttpConfig]:
    """A URL from the command line: checked, its credentials split off into the config (they win
    over the environment's), and the credential-free URL, the only one passed further."""
    from probes.http import check_url, origin, split_userinfo

    check_url(url, option)  # BadUrl, one line
    clean, auth = split_userinfo(url)
    if auth is not None:
        _by_origin[origin(clean)] = auth
    return clean.rstrip("/"), config(role, timeout=timeout, auth=auth)


def __getattr__(name: str):
    if name == "HttpConfig":  # re-exported, loaded when first asked for
        from probes.http import HttpConfig

        return HttpConfig
    raise AttributeError(f"module 'advisor.net' has no attribute {name!r}")


__all__ = ["ENGINE_CREDENTIALS_HELP", "PROM_CREDENTIALS_HELP", "CredentialsError", "HttpConfig", "Role",
           "ca_bundle", "check_tls", "config", "env_auth", "insecure_warning", "redact_url", "set_tls_options",
           "target", "tls_verify"]
