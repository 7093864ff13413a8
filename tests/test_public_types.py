"""The public API is typed whole: a notebook user's type checker or editor knows every parameter and return.

Every function of `tlm_probe.__all__`, every public method and property of its classes and of the classes
they take or return (the options dataclasses, ProbeModel, ProbeResult, DiffResult), and every field of
those dataclasses carries an annotation, and no annotation is a bare container (`dict`, `tuple`,
`Callable`, ...), which a type checker reads as holding Unknown. Read off the annotations as written
(`from __future__ import annotations` keeps them as text): independent of any type checker, and of the
names a module imports only under TYPE_CHECKING. Beside it, pyright itself checks a user's script
(tests/typed_usage.py), and `pyright --verifytypes` finds no symbol of unknown type among these names, on a
copy of the package that reads as installed.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest

import tlm_probe as tp

TAKEN_OR_RETURNED = {
    "ProbeModel": "tlm_probe.capture.probe_model",
    "ProbeResult": "tlm_probe.results",
    "DiffResult": "tlm_probe.diff.engine",
    "DiffOptions": "tlm_probe.diff.options",
    "PlotOptions": "tlm_probe.plotting.options",
    "ScheduleOptions": "tlm_probe.schedules.options",
    "ScheduleArch": "tlm_probe.commands.schedule",
    "TrainConfig": "tlm_probe.train.config",
    "TLMConfig": "tlm_probe.models.config",
}
"""Classes a public call takes (options=, arch=, config=) or returns (Handle.probe_model, tp.probe(full=True),
tp.diff, TrainConfig.model_config), beside those of __all__."""

BARE = {"dict", "list", "tuple", "set", "frozenset", "type", "Mapping", "Sequence", "Iterable", "Iterator",
        "Callable", "Generator"}
"""Containers that must say what they hold."""


def bare_containers(annotation: str) -> list[str]:
    """The container names in `annotation` not subscripted (`dict` in 'dict | None', not 'dict[str, int]')."""
    tree = ast.parse(annotation, mode="eval")
    subscripted = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name | ast.Attribute)]
    return [_name(n) for n in names if _name(n) in BARE and id(n) not in subscripted]


def _name(node: ast.AST) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr  # type: ignore[attr-defined]


def _text(annotation: object) -> str:
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def signature_problems(where: str, fn: object) -> list[str]:
    """What a type checker would not know about the callable `fn`: an unannotated parameter or return, or a
    bare container in either."""
    sig = inspect.signature(fn)
    out = []
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    for p in params:
        if p.annotation is inspect.Parameter.empty:
            out.append(f"{where}: parameter {p.name} has no annotation")
        elif bare := bare_containers(_text(p.annotation)):
            out.append(f"{where}: parameter {p.name} is {_text(p.annotation)} ({', '.join(bare)} of what?)")
    if sig.return_annotation is inspect.Signature.empty:
        out.append(f"{where}: no return annotation")
    elif bare := bare_containers(_text(sig.return_annotation)):
        out.append(f"{where}: returns {_text(sig.return_annotation)} ({', '.join(bare)} of what?)")
    return out


def class_problems(cls: type) -> list[str]:
    """The problems of every public method and property of `cls` (those it defines), of __init__ where it
    defines one, and of its dataclass fields' annotations."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        where = f"{cls.__name__}.{name}"
        if isinstance(member, property):
            out += signature_problems(where, member.fget)
        elif isinstance(member, staticmethod | classmethod):
            out += signature_problems(where, member.__func__)
        elif inspect.isfunction(member):
            out += signature_problems(where, member)
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if not f.name.startswith("_") and (bare := bare_containers(_text(f.type))):
                out.append(f"{cls.__name__}.{f.name}: field is {_text(f.type)} ({', '.join(bare)} of what?)")
    return out


def public_objects() -> dict[str, object]:
    import importlib

    objs = {name: getattr(tp, name) for name in tp.__all__}
    objs |= {name: getattr(importlib.import_module(mod), name) for name, mod in TAKEN_OR_RETURNED.items()}
    return objs


@pytest.mark.parametrize("name", sorted(public_objects()))
def test_every_public_name_is_typed_whole(name):
    obj = public_objects()[name]
    problems = class_problems(obj) if isinstance(obj, type) else signature_problems(name, obj)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("annotation", "bare"), [
    ("dict", ["dict"]), ("dict | None", ["dict"]), ("dict[str, Any]", []), ("tuple[dict, ...]", ["dict"]),
    ("Callable", ["Callable"]), ("Callable[[int], int]", []), ("collections.abc.Mapping", ["Mapping"]),
    ("'pd.DataFrame'", []), ("Sequence[tuple]", ["tuple"]), ("int | None", []),
])
def test_the_bare_container_reader(annotation, bare):
    """The check itself: it finds an unsubscripted container anywhere in an annotation, and only there."""
    assert bare_containers(annotation) == bare


def test_a_gap_is_reported():
    """An unannotated parameter, a missing return and a bare dict each come out, by name."""
    def f(x, y: dict, *, z: int = 0):  # noqa: ANN001, ANN202
        return None

    assert signature_problems("f", f) == ["f: parameter x has no annotation",
                                          "f: parameter y is dict (dict of what?)", "f: no return annotation"]


def test_registry_choices_stay_closed_at_run_time():
    """Fields whose choices are a registry's keys are `str` to a type checker (TYPE_CHECKING) but still
    the Literal of those keys at run time, where the CLI's choices and check_values read them."""
    import typing

    from tlm_probe.models.presets import PRESETS
    from tlm_probe.plotting.options import FIGURES, PlotOptions
    from tlm_probe.ranges import literal_values
    from tlm_probe.schedules.heads import COMPONENTS
    from tlm_probe.schedules.options import FromProbeOptions, ScheduleOptions
    from tlm_probe.schedules.rules import MONOTONE, TRANSFORMS
    from tlm_probe.train.config import TrainConfig

    def choices(cls: type, name: str) -> tuple:
        return literal_values(typing.get_type_hints(cls)[name])

    assert choices(PlotOptions, "kind") == tuple(FIGURES)
    assert choices(ScheduleOptions, "component") == tuple(COMPONENTS)
    assert choices(FromProbeOptions, "rule") == tuple(TRANSFORMS)
    assert choices(FromProbeOptions, "monotone") == MONOTONE == ("none", "decreasing", "increasing")
    assert choices(TrainConfig, "preset") == ("", *PRESETS)
    with pytest.raises(tp.UserError, match="kind"):
        PlotOptions(kind="nope")


def test_a_users_script_types_cleanly_under_a_real_checker():
    """tests/typed_usage.py (some 40 calls of the public API, as a notebook makes them) gives pyright no error
    but on the lines marked `# expect-error`, each of which it must refuse. pyright is in the dev extras (its
    wheel carries the checker); it runs on node, and is skipped where there is no node (the wrapper would
    download one)."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("node") is None:
        pytest.skip("no node on PATH to run pyright")
    script = Path(__file__).with_name("typed_usage.py")
    lines = script.read_text().splitlines()
    expected = {i for i, line in enumerate(lines, 1) if "  # expect-error:" in line}
    # from the repository root, with this interpreter's packages: the checker finds tlm_probe's source there
    # (an editable install's import hook is invisible to it); no check for a newer pyright (the network)
    env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}
    command = [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson", str(script)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=script.parents[1], env=env)
    diagnostics = json.loads(out.stdout)["generalDiagnostics"]
    found = {d["range"]["start"]["line"] + 1: d["message"] for d in diagnostics if d["severity"] == "error"}
    assert expected, "the script marks no line a checker must refuse"
    assert set(found) == expected, {"unexpected": {k: v for k, v in found.items() if k not in expected},
                                    "not refused": sorted(expected - set(found))}


def _verifytypes(tmp_path) -> dict:
    """pyright --verifytypes on a copy of tlm_probe under tmp_path/site, which it reads as installed (an
    editable install's import hook is invisible to it, and the repository root would read as local code);
    unknowns that come from other packages are left to them (--ignoreexternal)."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    if shutil.which("node") is None:
        pytest.skip("no node on PATH to run pyright")
    shutil.copytree(Path(tp.__file__).parent, tmp_path / "site" / "tlm_probe",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1", "PYTHONPATH": str(tmp_path / "site")}
    command = [sys.executable, "-m", "pyright", "--verifytypes", "tlm_probe", "--ignoreexternal",
               "--outputjson", "--pythonpath", sys.executable]
    out = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    report = json.loads(out.stdout)["typeCompleteness"]
    assert report["packageRootDirectory"] == str(tmp_path / "site" / "tlm_probe")
    return report


def test_verifytypes_finds_every_public_symbol_of_known_type(tmp_path):
    """The names of __all__, and every member of the public classes (those of __all__, those a call takes or
    returns, Cache and the edits), are of known type to `pyright --verifytypes`: what a user's checker
    infers for them. A type from `from torch import nn` reads as Unknown there (torch.nn's names are
    re-exported by a star import); the API names torch's classes by their full path."""
    from tlm_probe.capture import edits
    from tlm_probe.capture.cache import Cache

    report = _verifytypes(tmp_path)
    classes = [o for o in public_objects().values() if isinstance(o, type)] + [Cache]
    classes += [c for c in vars(edits).values() if isinstance(c, type) and c.__module__ == edits.__name__]
    roots = {f"{c.__module__}.{c.__qualname__}" for c in classes}
    roots |= {f"tlm_probe.{c.__name__}" for c in classes}
    functions = {f"tlm_probe.{n}" for n in tp.__all__ if not isinstance(getattr(tp, n), type)}
    unknown = {s["name"]: [d["message"] for d in s["diagnostics"]] for s in report["symbols"]
               if not s["isTypeKnown"]}
    public = {name: why for name, why in unknown.items()
              if name in functions or any(name == r or name.startswith(r + ".") for r in roots)}
    assert len(functions) > 10 and len(roots) > 20 and report["exportedSymbolCounts"]["withKnownType"] > 1000
    assert not public, public
