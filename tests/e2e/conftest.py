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


def settle(seconds: float = 5) -> None:
    """Let Prometheus take a scrape or two after the load ends."""
    time.sleep(seconds)
