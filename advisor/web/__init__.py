"""advisor serve: the dashboard (server-rendered pages) and its JSON API, on one shared core with
the CLI's reports (advisor/reports) and the fleet's jobs (advisor/fleet)."""

from advisor.web.app import ServeError, create_app

__all__ = ["ServeError", "create_app"]
