"""A griffe extension for the docs site: reST roles in docstrings become inline code.

The library's docstrings are Google style but refer to names Sphinx-fashion
(``:class:`Queue```, ``:meth:`Tailer.read```); mkdocstrings would show those
roles verbatim, so this rewrites each one to ``Queue`` as Markdown code.
Loaded by ``mkdocs.yml`` (``extensions: - scripts/griffe_rst_roles.py``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|exc|data|mod|obj|const):`~?([^`]+)`")


class RstRoles(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
