"""What the one-rule-one-wording tests share (tests/test_check_words*.py): each front end's refusal as its
user reads it (the launcher's one line, the agent's message, a component error's ``(problem, fix)``)."""

from __future__ import annotations

import contextlib
import io

import pytest

from components.errors import ArgumentError, StackConfigError
from runtime.agent import contract
from runtime.agent.errors import ConfigError
from runtime.agent.spec.agent_settings import AgentSettings
from runtime.local import hosts
from runtime.local.launch import build_parser, validate

PROG = "python -m runtime launch"
HELP = " (see --help)"

NODE_ENV = {contract.NODE_RANK_SETTING: "0", contract.COORDINATOR_HOST: "127.0.0.1", contract.TOKEN: "t",
            contract.JOB_NAME: "job", contract.ENTRYPOINT: '["train.py"]'}


def launcher_error(argv: list[str]) -> str:
    """The launcher's one-line parse error (exit 2) for ``argv``: its command line's, its checks', a per-node
    command line's (``launch.main``'s order)."""
    parser = build_parser()
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exit_info:
        ns = parser.parse_args(argv)
        validate(parser, ns)
        hosts.endpoint_of(parser, ns)
    assert exit_info.value.code == 2
    return stderr.getvalue().strip().splitlines()[-1]


def agent_error(env: dict[str, str]) -> str:
    """The agent's refusal of its environment (it exits 2 with this message)."""
    with pytest.raises(ConfigError) as info:
        AgentSettings.from_env({**NODE_ENV, **env})
    return str(info.value)


def parts(error: ArgumentError | StackConfigError) -> tuple[str, str]:
    """A component error's ``(problem, fix)``, as the check answered it."""
    return error.problem, error.fix


def assert_worded_alike(argv: list[str], flag: str, env: str, text: str, problem: str, fix: str) -> None:
    """The launcher refuses ``argv`` (``flag`` given ``text``) and the agent ``env=text`` with the same
    ``problem`` and ``fix``, each naming the setting its way."""
    assert launcher_error(argv) == f"{PROG}: error: {flag}: {problem} (got {text!r}); {fix}{HELP}"
    assert agent_error({env: text}) == f"{env}={text!r} is invalid: {problem}; {fix}"
