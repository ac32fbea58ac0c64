"""The FastAPI application: pages (advisor/web/pages.py), the JSON API (advisor/web/api.py), and
errors that never show a stack trace."""

from __future__ import annotations

import ipaddress
import logging
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse
from starlette.types import ASGIApp

from advisor.errors import AdvisorError
from advisor.app.watched import ExperimentRuns
from advisor.fleet.config import FleetConfig
from advisor.reports import html
from advisor.app.alerts_out import AlertsOut, alerts_out_for
from advisor.web.context import MAX_ID, Context
from advisor.web.middleware import DEFAULT_MAX_BODY_BYTES, BodyLimit, SecurityHeaders
from advisor.web.responses import SafeJSON
from advisor.settings import get_settings
from advisor.store import open_store
from advisor.web import alerts, api, pages

log = logging.getLogger("advisor.web")


class ServeError(AdvisorError):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Dashboard(FastAPI):
    """FastAPI with the body limit and the security headers outermost: outside Starlette's
    ServerErrorMiddleware, which sends a 500 past every middleware added the usual way."""

    max_body_bytes = DEFAULT_MAX_BODY_BYTES

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(BodyLimit(super().build_middleware_stack(), self.max_body_bytes))


def create_app(config: FleetConfig, *, store_url: str, token: str | None, host: str = "127.0.0.1",
               log_dir: Path | None = None, scheduler=None, max_body_bytes: int | None = None,
               alerts_out: AlertsOut | None = None) -> FastAPI:
    """The app for `config`. Refuses (ServeError) to listen beyond loopback without a token.
    Request bodies over max_body_bytes (default: ADVISOR_MAX_BODY_BYTES) get 413 before anything
    reads them."""

    loopback = is_loopback(host)
    if not loopback and not token:
        raise ServeError(f"refusing to listen on {host} without ADVISOR_API_TOKEN: anyone who reaches it could "
                         "read every diagnosis (bind to 127.0.0.1, or set a token)")
    runs = ExperimentRuns(store_url, log_dir or get_settings().data_dir / "serve-logs")
    store = open_store(store_url)  # migrated now: a bad database stops the server before it listens

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if scheduler is not None:
            scheduler.start()
        try:
            yield
        finally:
            if scheduler is not None:
                scheduler.stop()
            runs.stop_all()  # every experiment it started restores its baseline first
            store.close()

    app = _Dashboard(title="LLM serving advisor", version="0.1.0", lifespan=lifespan,
                     # Swagger UI and ReDoc load scripts from a CDN: the schema stays at /openapi.json.
                     docs_url=None, redoc_url=None)
    app.max_body_bytes = max_body_bytes if max_body_bytes is not None else get_settings().max_body_bytes
    if alerts_out is None:
        alerts_out = alerts_out_for(config)
    app.state.context = Context(config=config, store=store, store_url=store_url, token=token, loopback=loopback,
                                runs=runs, alerts_out=alerts_out)
    app.include_router(api.router)
    app.include_router(alerts.router)
    app.include_router(pages.router)
    if loopback:
        # DNS rebinding: a page on another site whose name resolves to 127.0.0.1 reaches us with its
        # own Host header; loopback reads need no token, so only loopback names are answered.
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        app.add_middleware(TrustedHostMiddleware, allowed_hosts=sorted({"127.0.0.1", "localhost", "[::1]", host}))

    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/") or request.url.path == "/openapi.json"

    def error(request: Request, status: int, message: str, headers=None):
        if wants_json(request):
            return SafeJSON({"detail": message}, status_code=status, headers=headers)
        page = html.render("error.html.j2", status=status, message=message, dashboard=True)
        return HTMLResponse(page, status_code=status, headers=headers)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error(request, exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError):
        if any(e.get("loc", ())[:1] == ("path",) for e in exc.errors()):
            # Path parameters are ids (advisor/web/context.py StoreId): one that is no integer, or
            # outside the store's range, names nothing.
            return error(request, 404, f"not found: an id is an integer from 1 to {MAX_ID}")
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return error(request, 422, f"{where}: {first.get('msg')}" if where else str(first.get("msg")))

    @app.exception_handler(AdvisorError)
    async def advisor_error(request: Request, exc: AdvisorError):
        status = getattr(exc, "status", 502)
        return error(request, status, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        log.exception("internal error on %s", request.url.path)  # the trace goes to the log, never the page
        return error(request, 500, "internal error (the server's log has the details)")

    return app
