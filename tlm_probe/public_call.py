"""`tp.probe(...)`, `tp.diff(...)`, `tp.train(...)`: the packages of those names are also the functions.

tlm_probe.probe, tlm_probe.diff and tlm_probe.train are packages, and Python sets a package as an
attribute of its parent when it is first imported, so a function `tlm_probe.probe` could not stay there
(and replacing the package would break `tlm_probe.probe.engine` for tools that walk attributes, such as
pytest's monkeypatch). So each of these packages is made callable: calling it calls the library function
of the same name (tlm_probe/api/library.py), imported on the first call; its __doc__ and signature
(inspect.signature, help in IPython) are the function's.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module

LIBRARY = "tlm_probe.api.library"


class _CallablePackage(types.ModuleType):
    def _function(self):
        return getattr(import_module(LIBRARY), self.__name__.rpartition(".")[2])

    def __call__(self, *args, **kwargs):
        return self._function()(*args, **kwargs)

    @property
    def __wrapped__(self):  # inspect.signature follows it to the function's signature
        return self._function()

    @property
    def __doc__(self):
        return self._function().__doc__


def make_callable(name: str) -> None:
    """Make the package `name` (its __init__ calls this with __name__) call its library function."""
    sys.modules[name].__class__ = _CallablePackage
