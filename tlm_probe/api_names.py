"""The Python API takes the CLI's names (issue 22): `probe(unsafe_pickle=...)` as `tlm probe --unsafe-pickle`.
An old keyword still works for a while, with a DeprecationWarning naming the new one; giving both is a
TypeError, as Python gives for any keyword passed twice."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def renamed_keywords(**old_to_new: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function whose keyword `old` is now called `new`: `old=` is passed on as `new=`."""

    def deco(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)  # inspect.signature shows the new names (it follows __wrapped__)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{fn.__name__}() got {old}= and {new}=; {old} is the old name of {new}")
                warnings.warn(f"{fn.__name__}({old}=...) is deprecated; use {new}= (as the CLI's "
                              f"--{new.replace('_', '-')})", DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return wrapper

    return deco
