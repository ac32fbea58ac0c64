"""Opening a store: validate the URL, build the engine, bring the schema to head with Alembic."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.util.exc import CommandError
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from advisor.settings import get_settings
from advisor.store.errors import StoreError, one_line, redact
from advisor.store.repository import Store
import tempfile

MIGRATIONS = Path(__file__).parent / "migrations"
SUPPORTED = ("sqlite", "postgresql")
# Seconds before an unreachable PostgreSQL counts as down; the driver's default is to wait forever.
CONNECT_TIMEOUT_S = 10
# Any fixed key: serialises concurrent migrations (say, the web app and a CLI run starting together).
_MIGRATION_LOCK = 0x61647669


def open_store(url: str | None = None) -> Store:
    """Open the store at `url` (default: Settings.database_url), migrated to the latest schema."""
    url = url or get_settings().database_url
    engine = _engine(_parse(url), url)
    try:
        upgrade(engine, url)
    except BaseException:
        engine.dispose()
        raise
    return Store(engine, url)


def upgrade(engine: Engine, url: str) -> None:
    """`alembic upgrade head` on this engine, with a Config built here instead of an alembic.ini."""
    config = Config()
    # Config values go through configparser interpolation, where "%" is special.
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    except SQLAlchemyError as exc:
        raise StoreError(f"cannot open the store at {redact(url)}: {one_line(exc, url)}") from exc
    except CommandError as exc:
        # Typically a database migrated by a newer advisor: its revision is unknown here.
        raise StoreError(f"cannot migrate the store at {redact(url)}: {one_line(exc, url)}") from exc


def _parse(url: str) -> URL:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StoreError(
            f"malformed database URL {redact(url)!r} ({one_line(exc, url)}); expected e.g. "
            "sqlite:///path/to/advisor.db or postgresql+psycopg://user:password@host:5432/advisor"
        ) from None
    backend = parsed.get_backend_name()
    if backend == "postgres":  # the scheme many hosting providers hand out
        parsed, backend = parsed.set(drivername="postgresql"), "postgresql"
    if backend not in SUPPORTED:
        raise StoreError(f"unsupported database URL {redact(url)!r}: the store runs on sqlite:// or postgresql://")
    if parsed.drivername == "postgresql":
        # The bare scheme means psycopg2 to SQLAlchemy; the driver we ship is psycopg 3.
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def _engine(parsed: URL, url: str) -> Engine:
    if parsed.get_backend_name() == "sqlite":
        _make_parent(parsed, url)
        engine = create_engine(parsed)
        event.listen(engine, "connect", _sqlite_foreign_keys)
        return engine
    try:
        # pre_ping: a long-running web app must survive the server closing idle connections.
        return create_engine(parsed, pool_pre_ping=True, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    except (ArgumentError, ImportError) as exc:
        raise StoreError(f"cannot use database URL {redact(url)!r}: {one_line(exc, url)}") from None


def _make_parent(parsed: URL, url: str) -> None:
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    writable_dir(Path(database).parent, f"the store at {redact(url)}")


def writable_dir(directory: Path, what: str) -> Path:
    """`directory`, created if missing, and shown to take a new file (tried, not guessed from
    permission bits: root, read-only mounts). One line naming `what` needed it, never a traceback.
    ADVISOR_DATA_DIR (the default store, experiment journals and locks) is checked this way."""

    blocker = next((p for p in (directory, *directory.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise StoreError(f"cannot use {directory} for {what}: {blocker} is a file, not a directory "
                         "(set ADVISOR_DATA_DIR or ADVISOR_DB_URL elsewhere)")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".advisor-write-check-"):
            pass
    except OSError as exc:
        raise StoreError(f"cannot write in {directory} for {what}: {exc.strerror or exc} "
                         "(set ADVISOR_DATA_DIR or ADVISOR_DB_URL elsewhere)") from None
    return directory


def _sqlite_foreign_keys(dbapi_connection, _record) -> None:
    # SQLite ignores foreign keys (and so ON DELETE CASCADE) unless each connection asks for them.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
