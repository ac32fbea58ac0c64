import threading
import time
from datetime import datetime, timezone

import pytest

from advisor.localstack.traffic import drive_sync


def pytest_collection_modifyitems(items):
    for item in items:
        if "/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


class Background:
    """Load driven in threads while a test probes; join() returns each run's DriveResult."""

    def __init__(self):
        self.threads, self.results = [], []

    def start(self, url: str, **kw) -> None:
        def run():
            self.results.append(drive_sync(url, **kw))

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append(t)

    def join(self, timeout: float = 300):
        for t in self.threads:
            t.join(timeout)
        return self.results


@pytest.fixture
def background():
    return Background()


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def settle(prom, since: float | None = None, timeout: float = 60) -> None:
    """Until `prom` holds a scrape of every one of its targets taken after `since` (wall-clock
    seconds; default now, for a load that has just ended), so that what the load did is in the
    series a diagnosis reads. Half a second of margin: the engine records a request's stats in the
    step that ends it, which may lag its last byte."""
    since = (time.time() if since is None else since) + 0.5
    deadline = time.monotonic() + timeout
    while True:
        seen = {x["metric"].get("instance"): float(x["value"][1]) for x in prom.query("timestamp(up)")}
        if all(seen.get(t, 0.0) > since for t in prom.targets):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"no scrape of {prom.targets} after the load within {timeout:.0f} s: {seen}")
        time.sleep(0.2)
