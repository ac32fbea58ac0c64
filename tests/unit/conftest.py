from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm-0.32.0-cpu"


@pytest.fixture
def capture():
    """Text of a real vLLM 0.32.0 CPU /metrics capture, by file stem."""
    return lambda stem: (FIXTURES / f"{stem}.txt").read_text()
