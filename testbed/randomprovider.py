"""A stand-in for the pulumi-random resource plugin, for the cluster tests only (never shipped).

Why: the program's DistributedJob makes its job token with ``random.RandomPassword``
(``components/job/component.py``), so the real ``__main__.py`` needs a ``random`` resource plugin, and
pulumi-random's provider module (github.com/pulumi/pulumi-random/provider/v4) is refused by the Go module
proxy here, any version, so it cannot be built. This plugin stands in for it, speaking the provider gRPC
protocol through the Python SDK's ``pulumi.provider.experimental`` server, and is installed into the test
``PULUMI_HOME`` under the venv's ``pulumi-random`` SDK version (``testbed/cluster/engine.py``).

What it implements, after the pulumi-random SDK's ``pulumi_random/random_password.py`` (4.21.4) and the
upstream resource it wraps (terraform-provider-random's ``random_password``):

- only ``random:index/randomPassword:RandomPassword``; any other type is refused by name;
- create: ``result``, a password of ``length`` characters drawn with ``secrets`` from the enabled sets
  (``lower``, ``upper``, ``numeric``/``number``, ``special`` or ``overrideSpecial``; each defaults to true),
  with at least ``minLower``/``minUpper``/``minNumeric``/``minSpecial`` of each; ``result`` is a secret in
  the outputs (the SDK also lists it in ``additional_secret_outputs``); the inputs are kept in the outputs;
- check: ``length`` must be a positive number and at least the sum of the minimums;
- diff: no change when the inputs equal the stored ones (the password is kept); any input changed
  (``length``, ``special``, ``keepers``, ...) replaces the resource, as every attribute of upstream's
  resource requires replacement;
- delete: nothing to remove (the value lives only in the state).

What it does not implement: ``bcryptHash`` (upstream's bcrypt hash of ``result``: no bcrypt library here,
and trainplane never reads it), import/read of an existing value, ``RandomString``, ``RandomId`` and every
other pulumi-random resource, and the provider's schema.
"""

from __future__ import annotations

import argparse
import secrets
import string
import sys
from typing import Any

from pulumi.provider.experimental import provider as p
from pulumi.provider.experimental.property_value import PropertyValue
from pulumi.provider.experimental.server import main
from pulumi.runtime.rpc import UNKNOWN

PASSWORD = "random:index/randomPassword:RandomPassword"  # noqa: S105 (a type token)
SPECIAL = "!@#$%&*()-_=+[]{}<>:?"
"""Upstream's default special characters."""
_DEFAULTS: dict[str, Any] = {"lower": True, "upper": True, "numeric": True, "number": True, "special": True,
                             "minLower": 0, "minUpper": 0, "minNumeric": 0, "minSpecial": 0}
_OUTPUTS = ("result", "bcryptHash")


def _plain(value: PropertyValue) -> Any:
    """A property value as plain Python (secrets unwrapped; lists and maps recursively)."""
    inner = value.value
    if isinstance(inner, dict):
        return {k: _plain(v) for k, v in inner.items()}
    if isinstance(inner, list):
        return [_plain(v) for v in inner]
    return inner


def _inputs(properties: dict[str, PropertyValue]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in properties.items() if k not in _OUTPUTS and not k.startswith("__")}


def _settings(inputs: dict[str, Any]) -> dict[str, Any]:
    return {**_DEFAULTS, **{k: v for k, v in inputs.items() if v is not None}}


def generate(inputs: dict[str, Any]) -> str:
    """A password for ``inputs`` (the resource's inputs by their schema names).

    Raises:
        ValueError: no character set is enabled, or ``length`` is below the minimums' sum.
    """
    s = _settings(inputs)
    length = int(s["length"])
    sets = [(s["lower"], string.ascii_lowercase, int(s["minLower"])),
            (s["upper"], string.ascii_uppercase, int(s["minUpper"])),
            (s["numeric"] and s["number"], string.digits, int(s["minNumeric"])),
            (s["special"], s.get("overrideSpecial") or SPECIAL, int(s["minSpecial"]))]
    enabled = [(chars, minimum) for on, chars, minimum in sets if on]
    if not enabled:
        raise ValueError("RandomPassword: lower, upper, numeric and special are all false; enable one")
    chars = [secrets.choice(c) for c, minimum in enabled for _ in range(minimum)]
    if len(chars) > length:
        raise ValueError(f"RandomPassword: length {length} is below the sum of the minimums ({len(chars)})")
    pool = "".join(c for c, _ in enabled)
    chars += [secrets.choice(pool) for _ in range(length - len(chars))]
    order = [secrets.randbelow(1 << 30) for _ in chars]
    return "".join(c for _, c in sorted(zip(order, chars)))


def _refuse(urn: str) -> None:
    """Refuse every type but ``RandomPassword``. The type is the URN's type part after its last ``$`` (a child's
    type is prefixed with its parents' types: ``trainplane:index:DistributedJob$random:...``)."""
    type_ = urn.split("::")[2].rsplit("$", 1)[-1]
    if type_ != PASSWORD:
        raise ValueError(f"the stand-in random plugin implements only {PASSWORD}, not {type_}")


class RandomStandIn(p.Provider):
    """The provider: ``RandomPassword`` only (the module docstring says what and why)."""

    async def check(self, request: p.CheckRequest) -> p.CheckResponse:
        """Refuse a missing or non-positive ``length`` by name; keep the inputs as given."""
        _refuse(request.urn)
        length = _plain(request.new_inputs.get("length", PropertyValue.null()))
        if isinstance(length, (int, float)) and length < 1:
            return p.CheckResponse(failures=[p.CheckFailure("length", "length must be at least 1")])
        if length is None:
            return p.CheckResponse(failures=[p.CheckFailure("length", "length is required")])
        return p.CheckResponse(inputs=request.new_inputs)

    async def diff(self, request: p.DiffRequest) -> p.DiffResponse:
        """No change when the inputs equal the stored ones; else a replacement naming the changed inputs."""
        _refuse(request.urn)
        old, new = _inputs(request.old_state), _inputs(request.new_inputs)
        changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        return p.DiffResponse(changes=bool(changed), replaces=changed, diffs=changed)

    async def create(self, request: p.CreateRequest) -> p.CreateResponse:
        """A new password (unknown in a preview: the SDK's unknown sentinel, as the gRPC protocol marshals it),
        secret in the outputs beside the inputs."""
        _refuse(request.urn)
        inputs = _inputs(request.properties)
        result = PropertyValue(UNKNOWN if request.preview else generate(inputs))
        return p.CreateResponse(resource_id="none" if request.preview else secrets.token_hex(8),
                                properties={**request.properties, "result": result.with_secret(True)})

    async def delete(self, request: p.DeleteRequest) -> None:
        """Nothing outside the state to remove."""
        _refuse(request.urn)


def run(argv: list[str]) -> None:
    """Serve the provider: ``--plugin-version V`` (the version it is installed as) and the engine's own
    arguments (its address, then flags the SDK's server parses)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--plugin-version", required=True)
    known, rest = parser.parse_known_args(argv)
    sys.argv = [sys.argv[0], *rest]
    main(rest, known.plugin_version, RandomStandIn())


if __name__ == "__main__":
    run(sys.argv[1:])
