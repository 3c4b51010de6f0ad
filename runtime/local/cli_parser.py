"""argparse as the launcher's command line uses it: one-line errors that name a flag as typed and hint at the
flag meant, and actions that remember the spelling typed (``ns.spelled``) for later errors. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, NoReturn, Optional, Sequence

from runtime.agent import contract


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: error: ...``) and exit code 2, and no abbreviated
    flags (``--nproc`` would be ambiguous between two spellings of one flag). An error about a flag
    with several spellings names the one typed; an unrecognized flag gets the nearest known one as a hint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "allow_abbrev": False})
        self._flags: set[str] = set()

    def parse_known_args(  # type: ignore[override]  # one signature for typeshed's three overloads
            self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> tuple[Any, list[str]]:
        self._flags = self._flags_before_script(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Exit 2 with ``prog: error: message (see --help)``; argparse's refusal of a flag's value
        (``argument --a/--b: ...``) names the flag as typed, as :func:`validate`'s refusals do (``--b: ...``), and
        an unrecognized flag gets the nearest known one (``--nnode``: did you mean ``--nnodes``?)."""
        message = re.sub(r"^argument ((?:-[\w-]+/)*-[\w-]+): ", lambda m: f"{self._as_typed(m[1])}: ", message)
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            message += "".join(f"; {flag}: did you mean {known}?" for flag, known in self._nearest(unknown[1].split()))
        self.exit(contract.EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")

    def _nearest(self, args: list[str]) -> list[tuple[str, str]]:
        """``(flag as typed, the known flag it is a prefix of or nearest to)`` for each of ``args`` that has one."""
        import difflib  # only on this error's path: the launcher's start imports what every launch needs

        known = [o for o in self._option_string_actions if o.startswith("--")]
        found = []
        for arg in args:
            flag = arg.partition("=")[0]
            if flag.startswith("--"):
                near = [o for o in known if o.startswith(flag)] or difflib.get_close_matches(flag, known, 1, 0.8)
                found += [(flag, near[0])] if near else []
        return found

    def _flags_before_script(self, args: list[str]) -> set[str]:
        """The flags typed for this launcher: up to SCRIPT (the first argument that is neither a flag
        nor a flag's value), as ``--flag`` without ``=value``; what follows SCRIPT is the script's."""
        flags: set[str] = set()
        remaining = iter(args)
        for arg in remaining:
            if arg == "--" or not arg.startswith("-"):
                break
            name, has_value, _ = arg.partition("=")
            flags.add(name)
            action = self._option_string_actions.get(name)
            if action is not None and action.nargs is None and not has_value:
                next(remaining, None)  # the flag's value
        return flags

    def _as_typed(self, spellings: str) -> str:
        """The spelling of ``--a/--b/--c`` that the command line used, else the first."""
        flags = spellings.split("/")
        return next((f for f in flags if f in self._flags), flags[0])


class Spelled(argparse.Action):
    """Store the value and remember the spelling typed (``ns.spelled[dest]``), for error messages."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.spelled = {**namespace.spelled, self.dest: option_string or self.option_strings[0]}


class Nodes(Spelled):
    """``--workers``/``--nnodes``: store N as ``workers`` and an elastic MIN (``MIN:MAX``) as ``nnodes_min``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        pair: Any = values  # node_count's (count, MIN)
        count, namespace.nnodes_min = pair
        super().__call__(parser, namespace, count, option_string)


class SpelledFlag(argparse.Action):
    """A flag (``nargs=0``) that stores ``const`` and remembers the spelling typed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, "nargs": 0})

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, self.const)
        namespace.spelled = {**namespace.spelled, self.dest: option_string or self.option_strings[0]}


class SpelledAppend(Spelled):
    """Append the value (a repeatable flag) and remember the spelling typed."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: Optional[str] = None) -> None:
        super().__call__(parser, namespace, [*getattr(namespace, self.dest), values], option_string)
