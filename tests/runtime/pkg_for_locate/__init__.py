"""A package for ``workflow.locate`` tests: a function in a package's ``__init__``."""


def in_init() -> str:
    """Defined in a package's __init__."""
    return "init"
