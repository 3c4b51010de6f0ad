"""Attribute docstrings (PEP 257: the string literal under an annotated class attribute), read from source.

Pulumi's component analyzer takes a component's input and output descriptions from them
(``pulumi.provider.experimental.analyzer``, ``Analyzer.get_docstring``); reading them the same way lets a
class document its fields once and other classes show the same text.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Optional


def attribute_docs(cls: type) -> dict[str, str]:
    """The docstring under each annotated attribute in the body of ``cls`` (not its bases), cleaned of
    indentation, by attribute name.

    Raises:
        OSError: the source of ``cls`` cannot be read.
    """
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body
    statements = [s for node in body if isinstance(node, ast.ClassDef) for s in node.body]
    docs: dict[str, str] = {}
    for statement, following in zip(statements, statements[1:]):
        if (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[statement.target.id] = inspect.cleandoc(following.value.value)
    return docs


def attributes_section(docs: dict[str, str], indent: str = "    ") -> str:
    """A Google-style ``Attributes:`` section listing ``docs`` (name to text), to append to a docstring."""
    lines = [f"\n\n{indent}Attributes:"]
    for name, text in docs.items():
        first, *rest = text.splitlines()
        lines.append(f"{indent}    {name}: {first}")
        lines += [f"{indent}        {line}" for line in rest]
    return "\n".join(lines) + "\n"


def document_fields(cls: type, field_docs: Optional[dict[str, str]] = None) -> None:
    """Append to ``cls``'s docstring an ``Attributes:`` section of ``field_docs`` (by default its attribute
    docstrings), which ``help()`` does not show otherwise."""
    cls.__doc__ = (cls.__doc__ or "") + attributes_section(attribute_docs(cls) if field_docs is None else field_docs)


def sentence(text: str) -> str:
    """``text`` (a phrase such as a job setting's doc) as a sentence: capitalised, ending in a full stop."""
    return f"{text[:1].upper()}{text[1:].rstrip('.')}."
