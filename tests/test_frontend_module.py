"""A user's nn.Module as it is: parameters and buffers become inputs, traced with functional_call,
built at each dims from its constructor arguments; every parameter gets its cotangent proved."""
from __future__ import annotations

import inspect
import json
import sys
import textwrap

import pytest

import optional

torch = optional.importorskip("torch")
nn = optional.importorskip("torch.nn")
F = optional.importorskip("torch.nn.functional")
models = optional.importorskip("torch_models")

from vjpcert.cli import main  # noqa: E402
from vjpcert.core.registry import SpecError  # noqa: E402
from vjpcert.frontends.pytorch import from_torch  # noqa: E402
from vjpcert.symbolic.fixed.prover import prove_claim  # noqa: E402


def _claims(op, dims):
    return {c: prove_claim(op, c, dims).verdict for c in op.claims()}


def test_a_module_class_is_built_at_its_dims_and_every_parameter_is_proved():
    dims = {"rows": 2, "D": 2, "F": 3}
    op = from_torch(models.LlamaMLP, init={"dim": "D", "hidden": "F"}, inputs={"x": ("rows", "D")}, dims=[dims])
    assert list(op.inputs) == ["x", "gate_weight", "up_weight", "down_weight"]
    assert op.shape(op.inputs["down_weight"], dims) == (2, 3)
    assert _claims(op, dims) == {f"vjp[{n}]": "proved" for n in op.inputs}
    # another dims builds another module: its shapes follow
    assert op.shape(op.inputs["gate_weight"], {"rows": 1, "D": 3, "F": 5}) == (5, 3)


def test_attention_inside_a_module_is_traced_on_its_math_path_and_proved():
    dims = {"b": 1, "t": 2, "D": 4}
    op = from_torch(models.CausalSelfAttention, init={"dim": "D", "heads": 2}, inputs={"x": ("b", "t", "D")}, dims=[dims])
    certs = [prove_claim(op, c, dims) for c in op.claims()]
    assert {c.verdict for c in certs} == {"proved"} and "vjp[qkv_weight]" in op.claims()
    assert any("math backend" in a for a in certs[0].assumptions)


def test_a_wrong_backward_inside_a_module_fails_with_a_witness():
    op = from_torch(models.WrongBlock, init={"dim": 2}, inputs={"x": ("rows", "n")}, dims=[{"rows": 1, "n": 2}])
    for claim in ("vjp[x]", "vjp[lin_weight]", "vjp[lin_bias]"):
        cert = prove_claim(op, claim, {"rows": 1, "n": 2})
        assert cert.verdict == "failed" and cert.evidence["witness"]


def test_an_instance_with_buffers_and_frozen_parameters():
    op = from_torch(models.Normed(3), inputs={"x": ("rows", "n")}, dims=[{"rows": 2, "n": 3}])
    assert list(op.inputs) == ["x", "bn_weight", "bn_bias"]
    assert set(op.nondiff) == {"frozen_weight", "bn_running_mean", "bn_running_var"}
    assert set(_claims(op, {"rows": 2, "n": 3}).values()) == {"proved"}


def test_dims_whose_modules_differ_in_no_shape_are_refused_not_mixed_up():
    """heads changes the function but no tensor's shape: a graph keyed by shapes cannot tell the two
    modules apart, so the op refuses rather than prove one with the other's graph."""
    ladder = [{"b": 1, "t": 2, "D": 4, "H": 1}, {"b": 1, "t": 2, "D": 4, "H": 2}]
    op = from_torch(models.CausalSelfAttention, init={"dim": "D", "heads": "H"}, inputs={"x": ("b", "t", "D")},
                    dims=ladder)
    assert prove_claim(op, "vjp[x]", ladder[0]).verdict == "proved"
    with pytest.raises(SpecError, match="same shapes"):
        prove_claim(op, "vjp[x]", ladder[1])


@pytest.mark.parametrize("source,match", [
    ("""
     class Builds(nn.Module):
         def forward(self, x):
             return nn.Linear(x.shape[-1], 2)(x)
     """, "build submodules in __init__"),
    ("""
     class Captures(nn.Module):
         def __init__(self):
             super().__init__()
             self.scale = torch.tensor([2.0, 3.0])

         def forward(self, x):
             return x * self.scale
     """, "register_buffer"),
])
def test_what_cannot_be_traced_is_refused_with_the_fix_and_the_users_line(tmp_path, monkeypatch, source, match):
    (tmp_path / "user_mod.py").write_text("import torch\nimport torch.nn as nn\n" + textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_mod", None)
    import user_mod
    cls = [v for k, v in vars(user_mod).items() if isinstance(v, type) and issubclass(v, nn.Module)
           and v.__module__ == "user_mod"][0]
    op = from_torch(cls, inputs={"x": ("rows", "n")}, dims=[{"rows": 1, "n": 2}])
    with pytest.raises(SpecError, match=match) as info:
        op.output
    assert "user_mod.py:" in str(info.value)
    sys.modules.pop("user_mod", None)


def test_init_is_only_for_modules():
    with pytest.raises(SpecError, match="nn.Module"):
        from_torch(lambda x: x * 2, inputs={"x": ("n",)}, dims=[{"n": 2}], init={"dim": 2})
    with pytest.raises(SpecError, match="instance"):
        from_torch(models.LlamaMLP(2, 3), init={"dim": 2}, inputs={"x": ("rows", "D")}, dims=[{"rows": 1, "D": 2}])


def test_the_command_line_proves_a_module_class_named_with_its_constructor(tmp_path, monkeypatch):
    # the same class as a user's own file
    module = "import torch.nn as nn\nimport torch.nn.functional as F\n\n\n" + inspect.getsource(models.LlamaMLP)
    (tmp_path / "user_mlp.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("user_mlp", None)
    reports = tmp_path / "r"
    assert main(["prove", "torch:user_mlp:LlamaMLP", "--init", "dim=D", "--init", "hidden=F", "--input", "x=rows,D",
                 "--dims", "rows=2,D=2,F=3", "--quiet", "--reports", str(reports)]) == 0
    verdicts = {p.name.split("__")[1]: json.loads(p.read_text())["verdict"]
                for p in (reports / "certificates" / "user_mlp.LlamaMLP").glob("*.json")}
    assert verdicts == {"vjp-x": "proved", "vjp-gate_weight": "proved", "vjp-up_weight": "proved",
                        "vjp-down_weight": "proved"}
    sys.modules.pop("user_mlp", None)


def test_uninitialised_memory_that_reaches_the_output_is_refused():
    op = from_torch(lambda x: torch.empty(x.shape, dtype=x.dtype) + x, name="reads_empty",
                    inputs={"x": ("n",)}, dims=[{"n": 2}])
    # what the memory held shows in the eager run, or as nan in the graph's evaluation
    with pytest.raises(SpecError, match="(?i)nan|another function when it runs on real arrays"):
        prove_claim(op, "vjp[x]", {"n": 2})


def test_a_module_that_casts_to_float32_and_back_is_proved_with_the_casts_stated():
    dims = {"rows": 2, "n": 3}
    op = from_torch(models.HFRMSNorm, init={"dim": "n"}, inputs={"x": ("rows", "n")}, dims=[dims])
    certs = [prove_claim(op, c, dims) for c in op.claims()]
    assert [c.verdict for c in certs] == ["proved", "proved"]
    assert any("converts between float dtypes" in a for a in certs[0].assumptions)


USER_LAYER = '''
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self, dim, seed=3):
        super().__init__()
        self.w = nn.Parameter(torch.ones(dim))
        {init}

    def forward(self, x):
        {forward}
        return torch.stack([x[..., i] for i in self.perm], -1) * self.w
'''

MODULE_STATE = {   # name -> (__init__'s line, forward's line, the refusal's words; None: proved)
    "counts_its_calls": ("self.perm, self.step = list(range(dim)), 0", "self.step += 1", "the module Layer.step"),
    "holds_a_constant": ("self.perm, self.scale = list(range(dim)), 2.0", "pass", None),
    "draws_its_structure": ("self.perm = torch.randperm(dim).tolist()", "pass",
                            "(the module Layer.perm): it differs between a module built after torch.manual_seed(0)"),
    "draws_it_from_its_own_seed": ("self.perm = torch.randperm(dim, generator=torch.Generator().manual_seed(seed)).tolist()",
                                   "pass", None),
    # an integer buffer is the module's own: one a forward reads is a captured constant, refused by the trace
    "reads_an_integer_buffer": ("self.perm = list(range(dim)); self.register_buffer('order', torch.randperm(dim))",
                                "x = x[..., self.order]", "a captured constant"),
    "holds_a_hook": ("self.perm = list(range(dim)); self.register_forward_hook(lambda m, i, o: o)", "pass", None),
}


@pytest.mark.parametrize("name", list(MODULE_STATE))
def test_a_module_class_is_one_function_of_its_inputs(tmp_path, monkeypatch, capsys, name):
    """A module is built once per dims and called by every claim: a forward that counts its calls on
    self computes one function for those calls and another later. A class that draws what is not a
    parameter (a permutation of its channels) in __init__ is one function per draw: vjpcert builds it
    under a fixed seed, and would prove that draw alone. Both are refused; state that stays as built,
    and a draw from a seed the constructor takes (an init= argument), are proved."""
    init, forward, refusal = MODULE_STATE[name]
    (tmp_path / "user_layer.py").write_text(USER_LAYER.format(init=init, forward=forward))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    sys.modules.pop("user_layer", None)
    code = main(["prove", "torch:user_layer:Layer", "--init", "dim=n", "--input", "x=rows,n", "--dims", "rows=2,n=3",
                 "--quiet", "--reports", str(tmp_path / "r")])
    sys.modules.pop("user_layer", None)
    err = capsys.readouterr().err
    if refusal is None:
        assert code == 0, err
    else:
        assert code == 2 and refusal in err, err
