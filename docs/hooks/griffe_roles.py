"""Griffe extension: the docstrings' reStructuredText roles as Markdown code.

codemask's docstrings name other objects as ``:class:`Grammar``` or ``:meth:`Stage.apply```; in the API
reference these read as plain code (`Grammar`, `Stage.apply`).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj|const):`~?([^`]+)`")


class ReSTRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(r"`\1`", obj.docstring.value)
