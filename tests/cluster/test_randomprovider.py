"""The stand-in random plugin (``testbed/randomprovider.py``): its passwords, and, through the real engine and the
venv's ``pulumi-random`` SDK, the lifecycle upstream's ``RandomPassword`` has: the value kept while the inputs
are unchanged, a new one when ``length`` or ``keepers`` change (every attribute of terraform-provider-random's
``random_password`` requires replacement), ``result`` a secret."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest

from testbed.cluster.build import build_all
from testbed.cluster.engine import Engine
from testbed.randomprovider import SPECIAL, generate

pytestmark = pytest.mark.cluster

PROGRAM = """import pulumi
import pulumi_random as random

config = pulumi.Config()
password = random.RandomPassword("pw", length=config.require_int("length"), special=False,
                                 keepers={"k": config.require("keeper")})
pulumi.export("pw", password.result)
"""


def test_a_password_has_its_length_and_minimums_from_the_enabled_sets() -> None:
    password = generate({"length": 40, "special": True, "minSpecial": 5, "minNumeric": 5, "upper": False})
    assert len(password) == 40
    assert sum(c in SPECIAL for c in password) >= 5
    assert sum(c in string.digits for c in password) >= 5
    assert not any(c in string.ascii_uppercase for c in password)
    assert set(generate({"length": 30, "special": False, "numeric": False, "upper": False})) <= set(
        string.ascii_lowercase)
    assert generate({"length": 24}) != generate({"length": 24})


def test_impossible_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="all false"):
        generate({"length": 8, "lower": False, "upper": False, "numeric": False, "special": False})
    with pytest.raises(ValueError, match="length 4 is below the sum of the minimums"):
        generate({"length": 4, "minUpper": 3, "minLower": 3})


def test_the_engine_keeps_the_value_until_length_or_keepers_change(tmp_path: Path) -> None:
    build_all(report=lambda _line: None)
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: random-stand-in\nruntime: python\n")
    (project / "__main__.py").write_text(PROGRAM)
    engine = Engine(project, tmp_path / "state", tmp_path / "no-kubeconfig")
    engine.run("stack", "init", "test")

    def up(length: int, keeper: str) -> str:
        engine.run("config", "set", "length", str(length))
        engine.run("config", "set", "keeper", keeper)
        engine.run("up", "--yes")
        return str(json.loads(engine.run("stack", "output", "pw", "--show-secrets", "--json").stdout))

    first = up(20, "a")
    assert len(first) == 20 and first.isalnum()
    assert json.loads(engine.run("stack", "output", "--json").stdout)["pw"] == "[secret]"
    engine.run("up", "--yes", "--expect-no-changes")
    assert up(20, "a") == first
    longer = up(28, "a")
    assert len(longer) == 28 and longer != first
    rekeyed = up(28, "b")
    assert len(rekeyed) == 28 and rekeyed != longer
    engine.run("destroy", "--yes")
