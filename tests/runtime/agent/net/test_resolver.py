"""The DNS seam: overrides first, then lookups retried with backoff until a deadline."""

from __future__ import annotations

import pytest

from runtime.agent.errors import RendezvousError
from runtime.agent.net.resolver import Resolver

pytestmark = pytest.mark.unit


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_overrides_win_over_dns():
    r = Resolver({"job-0.job": "127.0.0.9"}, lookup=lambda h: pytest.fail("DNS consulted"))
    assert r.resolve("job-0.job", timeout=1) == "127.0.0.9"


def test_lookup_is_retried_with_exponential_backoff_until_the_record_appears():
    t = FakeTime()
    answers = iter([OSError("NXDOMAIN")] * 4 + ["10.0.0.7"])

    def lookup(host: str) -> str:
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    r = Resolver(lookup=lookup, clock=lambda: t.now, sleep=t.sleep)
    assert r.resolve("job-0.job", timeout=30, first_delay=0.1, max_delay=0.5) == "10.0.0.7"
    assert t.sleeps == [0.1, 0.2, 0.4, 0.5]


def test_resolution_gives_up_at_the_deadline_naming_the_host():
    t = FakeTime()

    def lookup(host: str) -> str:
        raise OSError("NXDOMAIN")

    r = Resolver(lookup=lookup, clock=lambda: t.now, sleep=t.sleep)
    with pytest.raises(RendezvousError, match=r"could not resolve 'job-0\.job' within 3 s"):
        r.resolve("job-0.job", timeout=3)
    assert t.now <= 3
