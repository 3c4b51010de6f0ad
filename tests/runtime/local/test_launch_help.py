"""The launcher's ``--help`` says what each torchrun option does here: the per-node options are not
listed as plain no-ops (a new user read "no meaning here" beside ``--rdzv-endpoint``, which
``runtime.local.hosts`` uses for per-node command lines)."""

from __future__ import annotations

import pytest

from runtime.local.launch import build_parser
from runtime.local.torchrun_options import IGNORED, PER_NODE_HELP

pytestmark = pytest.mark.unit


def option_help(flag: str) -> str:
    action = next(a for a in build_parser()._actions if flag in a.option_strings)
    return str(action.help)


@pytest.mark.parametrize(("flag", "dest"), [("--rdzv-endpoint", "rdzv_endpoint"), ("--node-rank", "node_rank"),
                                            ("--local-addr", "local_addr")])
def test_the_per_node_options_help_says_what_they_do_and_when_they_are_ignored(flag: str, dest: str):
    text = option_help(flag)
    assert text == PER_NODE_HELP[dest]
    assert "ignored" in text and ("per-node" in text or "--rdzv-endpoint" in text)


def test_the_other_torchrun_options_keep_their_reason_for_being_ignored():
    assert option_help("--rdzv-backend") == IGNORED["rdzv_backend"]
    assert "this launcher does not" in option_help("--numa-binding")
