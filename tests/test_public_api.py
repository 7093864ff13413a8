"""The library side of the commands (tp.train, tp.compare, tp.probe, tp.plot, tp.diff, tp.schedule), the lazy
public names of `import tlm_probe as tp`, and the capture benchmark still running (tlm_probe/api/library.py,
tlm_probe/__init__.py, benchmarks/bench_capture.py). The commands' own tests check their numbers; here the
library side must give what the command gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from test_capture_api import _ZOO, build

import tlm_probe as tp
from tlm_probe.errors import UserError


def test_import_is_free_of_torch():
    code = ("import sys, tlm_probe as tp; assert callable(tp.__getattr__); "
            "bad = [m for m in ('torch', 'transformers', 'numpy', 'pandas') if m in sys.modules]; "
            "assert not bad, bad; print(sorted(tp.PUBLIC))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "load" in out.stdout


def test_every_public_name_resolves():
    for name in tp.PUBLIC:
        assert getattr(tp, name) is not None, name
    with pytest.raises(AttributeError):
        tp.not_a_name  # noqa: B018


def test_a_star_import_gives_the_public_names():
    names: dict = {}
    exec("from tlm_probe import *", names)
    assert tp.__all__ == [*tp.PUBLIC, "register_with_transformers"]
    assert set(tp.__all__) <= names.keys()
    assert names["load"] is tp.load and names["probe"] is tp.probe


def _shown_to_type_checkers(module) -> dict:
    """name -> object of the module's `if TYPE_CHECKING:` imports, each written `X as X` (a re-export)."""
    import ast
    from importlib import import_module

    tree = ast.parse(Path(module.__file__).read_text())
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    aliases = [(alias, node.module) for node in block.body for alias in node.names]
    assert all(alias.asname == alias.name for alias, _ in aliases)  # `X as X`: re-exported to type checkers
    return {alias.name: getattr(import_module(where), alias.name) for alias, where in aliases}


def test_editors_are_shown_the_same_names_as_the_lazy_attributes():
    """Editors, type checkers and IPython's completer run no module __getattr__: __init__'s TYPE_CHECKING
    imports show them the public names. They must be PUBLIC's names and the objects __getattr__ gives (for the
    callable packages, the library call they make)."""
    import inspect

    shown = _shown_to_type_checkers(tp)
    assert shown.keys() == tp.PUBLIC.keys()
    for name, value in shown.items():
        lazy = getattr(tp, name)
        assert value is (lazy._function() if inspect.ismodule(lazy) else lazy), name


@pytest.mark.parametrize(("package", "lazy"), [("tlm_probe.capture", "_LOADING"),
                                               ("tlm_probe.plotting", "_WHERE")])
def test_a_lazy_package_shows_type_checkers_its_names(package, lazy):
    """These packages import their heavy modules only when a name is used; their TYPE_CHECKING imports show
    the same names (ProbeModel, in tp.load's ModelLike, had read as Any to a type checker)."""
    from importlib import import_module

    module = import_module(package)
    shown = _shown_to_type_checkers(module)
    assert shown.keys() == set(getattr(module, lazy))
    assert all(value is getattr(module, name) for name, value in shown.items())


def test_ipythons_completer_offers_the_names_and_their_signatures():
    """jedi (what IPython completes with, as do editors' jedi servers) reads the source without running it.
    Before the TYPE_CHECKING imports it offered no public name at all."""
    import jedi

    env = jedi.InterpreterEnvironment()
    script = jedi.Script("import tlm_probe as tp\ntp.", environment=env)
    assert set(tp.PUBLIC) <= {c.name for c in script.complete(2, 3)}
    signatures = jedi.Script("import tlm_probe as tp\ntp.probe(", environment=env).get_signatures(2, 9)
    assert signatures and all([p.name for p in s.params][:3] == ["model", "data", "options"]
                              for s in signatures)  # two: the table, and the ProbeResult with full=True
    source = "import tlm_probe as tp\ncache = tp.load('m').run_with_cache('a')\ncache"
    made = jedi.Script(source, environment=env)
    assert [d.name for d in made.infer(3, 0)] == ["Cache"]  # so that cache[...] and cache.loss complete


def test_probe_takes_a_loaded_module():
    """tp.probe (and the engine's probe) take the nn.Module a notebook already holds (issue 46: it was a
    TypeError): the same table as through a Handle of the same module."""
    import numpy as np

    from tlm_probe.api.library import probe

    model = build("gpt2")
    ids = np.random.default_rng(0).integers(5, 300, size=(4, 16))
    direct = probe(model, ids, stats="align_mlp_mid", max_tokens=0)
    handled = tp.probe(tp.load(model), ids, stats="align_mlp_mid", max_tokens=0)
    assert direct["value"].tolist() == handled["value"].tolist() and len(direct) == 3


def test_schedule_is_the_command_json():
    import json

    from typer.testing import CliRunner

    from tlm_probe.cli import app

    args = ["schedule", "--schedule", "linear:1.5:0.5", "--layers", "6", "--d-ff", "1024", "--json"]
    printed = json.loads(CliRunner().invoke(app, args).stdout)
    assert tp.schedule("linear:1.5:0.5", n_layers=6, d_ff=1024) == printed


def test_train_probe_plot_diff_from_the_library(tmp_path):
    """tp.train writes the run `tlm train` writes; tp.probe, tp.plot and tp.diff read it back, as their
    commands do (the commands' own tests check the numbers; here: the library side runs end to end)."""
    tiny = dict(steps=2, threads=1, multiple_of=16, seq_len=16, d_model=32, n_layers=2, n_heads=2, d_ff=64,
                eval_tokens=64, batch_size=2, eval_interval=2, progress=False)
    runs = [tmp_path / "a", tmp_path / "b"]
    for seed, run in enumerate(runs):
        summary = tp.train(out=run, seed=seed, **tiny)
        assert summary["step"] == 2 and (run / "model.safetensors").is_file()
    res = tp.probe(runs[0], max_tokens=64, seq_len=16, full=True)
    assert sorted(res.table["layer"].unique()) == [0, 1]
    from tlm_probe.results import write_probe

    write_probe(tmp_path / "probe", res)
    fig = tp.plot([tmp_path / "probe"], kind="depth", statistic="align_mlp_mid", out=tmp_path / "depth.png")
    assert (tmp_path / "depth.png").stat().st_size > 0 and fig.axes
    # the table in memory draws what its folder draws (it was iterated over its column names)
    held = tp.plot(res.table, kind="depth", statistic="align_mlp_mid")
    assert [line.get_xydata().tolist() for line in held.axes[0].lines] == [
        line.get_xydata().tolist() for line in fig.axes[0].lines] and fig.axes[0].lines
    both = tp.plot([res, tmp_path / "probe"], kind="depth", statistic="align_mlp_mid")
    assert len(both.axes[0].get_legend_handles_labels()[1]) == 2  # one model twice: two lines, named apart
    bad = res.table.assign(value=res.table["value"].where(res.table["layer"] != 1, float("inf")))
    with pytest.raises(UserError, match="table 1"):  # checked as its file would be
        tp.plot(bad, kind="depth")
    with pytest.raises(UserError, match="this one takes folders"):
        tp.plot(res.table, kind="sweep")
    with pytest.raises(UserError, match="same model"):
        tp.diff(runs[0], runs[0])
    d = tp.diff(runs[0], runs[1], max_tokens=64, seq_len=16, out=tmp_path / "diff")
    assert (tmp_path / "diff" / "diff.json").is_file() and d.cka.shape == (2, 2)
    with pytest.raises(UserError, match="needs out="):
        tp.train(**tiny)
    again = tp.train(dict(tiny, seed=0), out=tmp_path / "from-dict")  # a config file's content, as a dict
    assert again["val_loss"] == tp.train(out=tmp_path / "from-keywords", seed=0, **tiny)["val_loss"]
    for bad, says in (({"config": 3}, "config is a TrainConfig, a dict"),
                      ({"out": 3}, "out= is the run folder"),
                      ({"stop_at": 1.5}, r"--stop-at must be an integer in \[1, ")):
        with pytest.raises(UserError, match=says):
            tp.train(**{"out": tmp_path / "bad", **tiny, **bad})
        assert not (tmp_path / "bad").exists()


def test_capture_benchmark_runs(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from models_zoo import build_model

    from benchmarks import bench_capture

    folder = build_model("llama", tmp_path / "llama")
    res = bench_capture.run(True, tmp_path, rounds=1, folder=folder)
    agree = next(v for k, v in res.items() if "agreement" in k)
    assert all(a["max_abs_diff"] <= 1e-5 * max(1.0, a["scale"]) for a in agree.values()), agree
    assert all("error" not in v for v in res.values())


@pytest.mark.parametrize("module", [torch.nn.Linear(3, 3), torch.nn.Sequential()],
                         ids=["Linear", "Sequential"])
def test_a_module_that_is_no_model_is_one_user_error(module):
    """tp.load and tp.probe of a module with no model config: one line naming it (it was an AttributeError
    from deep inside the wrapper)."""
    for call in (lambda: tp.load(module), lambda: tp.probe(module, "builtin:pydoc")):
        with pytest.raises(UserError, match=f"a loaded {type(module).__name__} is not a model tlm can probe"):
            call()


@pytest.mark.parametrize(("call", "says"), [
    (lambda: tp.probe("nope", "builtin:pydoc", max_tokenz=10),
     "unknown option(s): max_tokenz (did you mean max_tokens?)"),
    (lambda: tp.probe("nope", "builtin:pydoc", max_tokens="lots"), "max_tokens must be an integer in [0, "),
    (lambda: tp.plot(["nope"], kindd="depth"), "unknown option(s): kindd (did you mean kind?)"),
    (lambda: tp.diff("a", "b", max_tokns=10), "unknown option(s): max_tokns (did you mean max_tokens?)"),
    (lambda: tp.schedule("uniform", arch={"layerz": 3}),
     "unknown option(s): layerz (did you mean n_layers?)"),
    (lambda: tp.schedule("cosine", n_layers="four"), "n_layers must be an integer in [1, 10000], got 'four'"),
    (lambda: tp.schedule("cosine", n_layers=9.5), "n_layers must be an integer in [1, 10000], got 9.5"),
    (lambda: tp.probe("nope", "builtin:pydoc", max_tokens=1e3), "max_tokens must be an integer in [0, "),
    (lambda: tp.probe("nope", options=3), "options is a ProbeOptions or a dict of its fields, not int"),
    (lambda: tp.probe(build("gpt2"), tokenizer=3), "tokenizer= is a tokenizer, or the folder or hub name"),
    (lambda: tp.probe(build("gpt2"), tokenizer="/nowhere"), "no tokenizer could be loaded from it"),
    (lambda: tp.load(build("gpt2"), dtype="float64"), "stays where it is: drop dtype="),
    (lambda: tp.load(build("gpt2"), dtype="float65"), "--dtype must be one of"),
    (lambda: tp.schedule(["cosine"]), "a schedule is text"),
], ids=["probe-typo", "probe-word-for-number", "plot-typo", "diff-typo", "schedule-arch-dict-typo",
        "schedule-word-for-number", "schedule-fraction-for-a-count", "probe-float-for-a-count",
        "options-of-another-kind", "tokenizer-of-another-kind", "tokenizer-folder-without-one",
        "load-moves-a-loaded-module", "load-bad-dtype", "schedule-list-of-words"])
def test_a_library_calls_bad_keyword_is_one_user_error_before_any_work(call, says):
    """As on the command line: a misspelt keyword names itself and the closest field, a word where a number
    belongs names the field (they were TypeErrors from a dataclass or from arithmetic deep inside)."""
    with pytest.raises(UserError) as e:
        call()
    assert says in str(e.value), str(e.value)


def test_numpys_integers_are_counts():
    """A count computed with NumPy (np.int64) is a count: the same widths as Python's ints."""
    import numpy as np

    ours = tp.schedule("cosine", n_layers=9, d_ff=256)
    assert tp.schedule("cosine", n_layers=np.int64(9), d_ff=np.int32(256))["widths"] == ours["widths"]
    assert tp.schedule("cosine", n_layers=9, d_ff=256, vocab_size=0) == ours  # 0: derive it, as elsewhere


def test_python_values_where_the_command_line_has_text(tmp_path):
    """A list of statistics for --stats a,b; a list of widths for an explicit schedule; texts of a list;
    a tokenizer's folder for the tokenizer."""
    import numpy as np

    ids = np.random.default_rng(0).integers(5, 300, size=(2, 16))
    model = build("gpt2")
    listed = tp.probe(model, ids, stats=["align_mlp_mid", "norm_ratio_mlp"], max_tokens=0)
    assert listed.equals(tp.probe(model, ids, stats="align_mlp_mid,norm_ratio_mlp", max_tokens=0))
    widths = [512, 256, 64, 96, 96, 192, 224, 352, 512]
    assert tp.schedule(widths, n_layers=9, d_ff=256) == tp.schedule(",".join(map(str, widths)), n_layers=9,
                                                                     d_ff=256)
    tok = _ZOO["gpt2"][2]()
    tok.save_pretrained(tmp_path / "tok")
    texts = ["The quick brown fox jumps over the lazy dog.", "def f(x):\n    return x"]
    assert tp.probe(model, texts, tokenizer=tmp_path / "tok", seq_len=8, max_tokens=0).equals(
        tp.probe(model, texts, tokenizer=tok, seq_len=8, max_tokens=0))
    with pytest.raises(UserError, match="a list of texts holds texts, not int"):
        tp.probe(model, ["a text", 3], tokenizer=_ZOO["gpt2"][2](), max_tokens=0)
    with pytest.raises(UserError, match="or a list of texts, not int"):
        tp.probe(model, 3, tokenizer=_ZOO["gpt2"][2](), max_tokens=0)


def test_options_may_be_given_as_a_dict():
    res = tp.schedule("cosine", arch={"n_layers": 4, "d_ff": 256})
    assert res == tp.schedule("cosine", n_layers=4, d_ff=256)


def test_a_handles_bad_inputs_are_one_user_error_each():
    """Ids outside the vocabulary, more positions than the model has, an add() vector of the wrong width:
    one line each (they were an IndexError from the embedding, the model's own ValueError and a
    RuntimeError from torch's broadcasting)."""
    import torch

    handle = tp.load(build("llama"))
    vocab, width = handle.probe_model.vocab_size, handle.probe_model.d_model
    with pytest.raises(UserError, match=f"token id {vocab} is outside .* vocabulary of {vocab:,} ids"):
        handle.run_with_cache(torch.tensor([[1, vocab]]), names=["mlp_out"])
    with pytest.raises(UserError, match="tokens in a sequence exceed .* maximum of .* positions"):
        handle.run_with_cache(torch.ones(1, 10**5, dtype=torch.long), names=["mlp_out"])
    with pytest.raises(UserError, match=rf"a vector of shape \(7,\) does not broadcast .*give \({width},\)"):
        with handle.hooks({("mlp_out", 0): tp.add(torch.ones(7))}):
            handle.run_with_cache(torch.tensor([[1, 2]]), names=[])
    assert handle.run_with_cache(torch.tensor([[1, 2]]), names=["mlp_out"])["mlp_out", 0].shape[-1] == width


def test_numpy_numbers_are_numbers():
    """A count computed with numpy (np.int64) is taken where an int belongs, and still range-checked."""
    import numpy as np

    from tlm_probe.probe.options import ProbeOptions

    assert ProbeOptions(max_tokens=np.int64(4096)).max_tokens == 4096
    with pytest.raises(UserError, match="max_tokens must be an integer in"):
        ProbeOptions(max_tokens=np.int64(-3))


def test_compare_from_the_library_is_the_command(tmp_path):
    """tp.compare trains the runs `tlm compare` trains (the same losses, bit for bit), writes the same
    tables and paired.png, and takes lists where the command line has comma-separated text."""
    from typer.testing import CliRunner

    from cli import app

    tiny = dict(steps=2, threads=1, multiple_of=16, seq_len=16, d_model=32, n_layers=3, n_heads=2, d_ff=64,
                eval_tokens=64, batch_size=2, eval_interval=2)
    flags = [x for k, v in tiny.items() for x in (f"--{k.replace('_', '-')}".replace("n-layers", "layers")
                                                   .replace("n-heads", "heads"), str(v))]
    r = CliRunner().invoke(app, ["compare", "--schedules", "uniform,cosine:1.5:0.5", "--seeds", "0,1",
                                 "--out", str(tmp_path / "cli"), *flags])
    assert r.exit_code == 0, r.output
    doc = tp.compare(["uniform", "cosine:1.5:0.5"], [0, 1], out=tmp_path / "lib", progress=False, **tiny)
    assert doc["paired_figure"] == str(tmp_path / "lib" / "paired.png")
    assert Path(doc["paired_figure"]).is_file()
    cols = ["arm", "seed", "val_loss", "val_ppl", "params", "flops_per_token", "d_ff"]
    cli, lib = (pd.read_csv(tmp_path / x / "results.csv")[cols] for x in ("cli", "lib"))
    pd.testing.assert_frame_equal(cli, lib, check_exact=True)
    pd.testing.assert_frame_equal(pd.DataFrame(doc["results"])[cols[:3]], lib[cols[:3]], rtol=1e-12)
    for bad, says in (({"schedules": "uniform,cosnie"}, "unknown schedule 'cosnie'"),
                      ({"seeds": "0,x"}, "seed"), ({"out": None}, r"compare\(\) needs out="),
                      ({"mixers": ["attention", "nope"]}, "nope"), ({"stepz": 3}, "did you mean steps"),
                      ({"eval_tasks": ["nosuch_task"]}, "unknown task 'nosuch_task'")):
        with pytest.raises(UserError, match=says):
            tp.compare(**{"schedules": "uniform,cosine:1.5:0.5", "out": tmp_path / "bad", **tiny, **bad})
        assert not (tmp_path / "bad").exists()
    scored = tp.compare("uniform,cosine:1.5:0.5", "0", out=tmp_path / "eval", progress=False,
                        eval_tasks=["pydoc-lastword"], eval_limit=2, **tiny)
    assert {"pydoc-lastword:acc", "pydoc-lastword:perplexity"} <= set(scored["results"][0])
    assert (tmp_path / "eval" / "runs" / "uniform-s0" / "eval").is_dir()
