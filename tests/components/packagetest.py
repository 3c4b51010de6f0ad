"""What the package tests share: the schema type each Python scalar of an args dataclass stands for."""

from __future__ import annotations

SCALARS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
