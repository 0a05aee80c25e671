"""Griffe extensions for the docs site (loaded by ``mkdocs.yml``).

``RstRoles``: the library's docstrings are Google style but refer to names
Sphinx-fashion (``:class:`Queue```, ``:meth:`Tailer.read```); mkdocstrings would
show those roles verbatim, so each one becomes ``Queue`` as Markdown code.

``PrivateBases``: a public class that inherits from a private helper (the
``_Resource`` base of ``Queue``/``Appender``/``Tailer``, the mixin that gives
``Tailer`` its async methods) should not list that helper under "Bases", since
the reference has no entry for it; its members are shown on the public class
instead (``inherited_members`` in ``docs/api.md``).
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


def _private(path: str, exported: set[str]) -> bool:
    """True for a base that lives in a private module and is not re-exported."""
    parts = path.split(".")
    if parts[-1].startswith("_"):
        return True
    if parts[0] != "aiochronicle" or not any(p.startswith("_") for p in parts[1:-1]):
        return False
    return parts[-1] not in exported


class PrivateBases(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "aiochronicle":
            return
        exported = {str(n).strip("'\"") for n in (pkg.exports or ())}
        self._strip(pkg, exported, set())

    def _strip(self, obj: griffe.Object, exported: set[str], seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        for member in list(obj.members.values()):
            if member.is_alias:
                continue
            if isinstance(member, griffe.Class):
                self._adopt(member, exported)
            if isinstance(member, (griffe.Module, griffe.Class)):
                self._strip(member, exported, seen)

    @staticmethod
    def _adopt(cls: griffe.Class, exported: set[str]) -> None:
        """Move what ``cls`` inherits from private bases onto ``cls``, then drop them."""
        private = [b for b in cls.bases
                   if _private(getattr(b, "canonical_path", str(b)), exported)]
        if not private:
            return
        private_paths = {getattr(b, "canonical_path", str(b)) for b in private}
        for name, alias in cls.inherited_members.items():
            owner = alias.target.parent
            if name in cls.members or owner is None or owner.path not in private_paths:
                continue
            cls.members[name] = griffe.Alias(name, alias.target, parent=cls)
        cls.bases = [b for b in cls.bases if b not in private]
