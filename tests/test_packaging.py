"""Installing tlm_probe adds one top-level name, the package: the console script `tlm` runs a function inside
it (tlm_probe.cli:main), no top-level `cli` module is installed, and the checkout's cli.py (for `python
cli.py` and torchrun) is a shim over the same app."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_the_console_script_lives_in_the_package_and_nothing_else_is_installed():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    target = project["project"]["scripts"]["tlm"]
    module, func = target.split(":")
    assert module.split(".")[0] == "tlm_probe", target
    assert callable(getattr(importlib.import_module(module), func))
    setuptools = project["tool"]["setuptools"]
    assert "py-modules" not in setuptools, setuptools  # a top-level cli module in site-packages
    assert setuptools["packages"]["find"]["include"] == ["tlm_probe*"]


def test_the_checkout_cli_py_runs_the_same_app():
    import cli
    import tlm_probe.__main__ as dunder_main
    from tlm_probe import cli as packaged

    assert cli.app is packaged.app and cli.main is packaged.main is dunder_main.main
