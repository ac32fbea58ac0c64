"""Alembic environment, run only through advisor.store.connect.upgrade().

The caller hands over an open connection in config.attributes["connection"], so that migrations
run on the very engine the store uses (this also makes in-memory SQLite work) and no alembic.ini
or URL is needed here.
"""

from __future__ import annotations

from alembic import context

from advisor.store.tables import Base

# A table name of our own, so that a PostgreSQL database shared with another Alembic-managed
# application keeps both version histories apart.
VERSION_TABLE = "advisor_alembic_version"

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("advisor migrations run through advisor.store.open_store(), which passes a connection")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    # SQLite cannot ALTER most things; batch mode lets later migrations rebuild tables there.
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
