"""The package from this checkout (no install needed), and the stand-in for `agentrt serve`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from standin import StandIn  # noqa: E402


@pytest.fixture
def agentrt():
    """A stand-in for `agentrt serve` on loopback (tests/standin.py): its hint endpoint and a
    scripted /v1/chat/completions."""
    server = StandIn().start()
    try:
        yield server
    finally:
        server.stop()
