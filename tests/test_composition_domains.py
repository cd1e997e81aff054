"""A composite's proof rests on its nodes' certificates only where they apply: a node proved "for every
s > 0" says nothing about a call at s = -3. Each node call's parameter values are held to the node's
declared domain -- a constant, a fraction, zero, a parameter of the composite (whose own domain must
imply the node's), a linear combination of them, a value computed from inputs -- and a call outside it
rests on a proof at exactly that value, or for every real value, or the composite is not proved."""
import textwrap

import pytest

from vjpcert.core.registry import load_file
from vjpcert.symbolic.composition.compose import prove_compositional

# Nodes in the README's format: `pscale` is right only for s > 0 (sqrt(s*s) is |s|), `rscale` for every
# real s, `kscale` only at its structural default k = 2.
NODES = '''
from fractions import Fraction

import numpy as np
from vjpcert import op, Param


@op(inputs={"x": ("n",)}, output=("n",), params={"s": Param(Fraction(2), positive=True)}, dims=[{"n": 2}])
def pscale(B, x, s):
    """y = sqrt(s*s) x, which is s x for s > 0."""
    return B.sqrt(s * s) * x


@pscale.defvjp
def _(B, x, s, dy):
    return (s * dy,)


@op(inputs={"x": ("n",)}, output=("n",), params={"s": Param(Fraction(-3), positive=True)}, dims=[{"n": 2}])
def pscale_neg_default(B, x, s):
    """pscale with a default its own domain excludes: the default is a number for the numeric tier, not
    a value the symbolic proof (for every s > 0) is at."""
    return B.sqrt(s * s) * x


@pscale_neg_default.defvjp
def _(B, x, s, dy):
    return (s * dy,)


@op(inputs={"x": ("n",)}, output=("n",), params={"s": Param(Fraction(2), positive=True)}, dims=[{"n": 2}])
def pscale_any(B, x, s):
    """y = s x, declared for s > 0 but right for every real s."""
    return s * x


@pscale_any.defvjp
def _(B, x, s, dy):
    return (s * dy,)


@op(inputs={"x": ("n",)}, output=("n",), params={"s": Param(Fraction(2))}, dims=[{"n": 2}])
def rscale(B, x, s):
    """y = s x for every real s."""
    return s * x


@rscale.defvjp
def _(B, x, s, dy):
    return (s * dy,)


@op(inputs={"x": ("n",)}, output=("n",), params={"k": Param(2, symbolic=False)}, dims=[{"n": 2}])
def kscale(B, x, k):
    """y = k x; the backward hard-codes k = 2."""
    return x * k


@kscale.defvjp
def _(B, x, k, dy):
    return (dy * 2,)
'''


def _composite(name: str, node: str, value: str, params: str = "{}", nondiff: str = "None",
               extra_args: str = "") -> str:
    """A composite calling `node` with its parameter set to the expression `value`."""
    pname = "k" if node == "kscale" else "s"
    return f'''

@op(inputs={{"x": ("n",)}}, output=("n",), nodes={{"f": {node}}}, proofs=("compositional",),
    params={params}, nondiff={nondiff}, dims=[{{"n": 2}}])
def {name}(B, x{extra_args}, nodes):
    return nodes.f(x, {pname}={value})


@{name}.defvjp
def _(B, x{extra_args}, dy, nodes):
    return nodes.f.vjp(x, dy, {pname}={value})
'''


CASES = {
    # name: (node, value passed, composite params, composite nondiff, extra args)
    "at_minus_3": ("pscale", "-3", "{}", "None", ""),
    "at_3": ("pscale", "3", "{}", "None", ""),
    "at_c_minus_3": ("pscale", "B.c(-3)", "{}", "None", ""),
    "at_minus_half": ("pscale", "B.c(-1, 2)", "{}", "None", ""),
    "at_three_halves": ("pscale", "B.c(3, 2)", "{}", "None", ""),
    "at_zero": ("pscale", "0", "{}", "None", ""),
    "own_positive": ("pscale", "t", '{"t": Param(Fraction(3), positive=True)}', "None", ", t"),
    "own_real": ("pscale", "t", '{"t": Param(Fraction(3))}', "None", ", t"),
    "own_positive_doubled_plus_1": ("pscale", "2 * t + 1", '{"t": Param(Fraction(3), positive=True)}',
                                    "None", ", t"),
    "own_positive_negated": ("pscale", "-t", '{"t": Param(Fraction(3), positive=True)}', "None", ", t"),
    "own_structural_minus_3": ("pscale", "t", '{"t": Param(-3, symbolic=False)}', "None", ", t"),
    "from_nondiff": ("pscale", "w[0]", "{}", '{"w": (1,)}', ", w"),
    "real_from_nondiff": ("rscale", "w[0]", "{}", '{"w": (1,)}', ", w"),
    "at_its_default_minus_3": ("pscale_neg_default", "-3", "{}", "None", ""),
    "any_from_nondiff": ("pscale_any", "w[0]", "{}", '{"w": (1,)}', ", w"),
    "k_at_3": ("kscale", "3", "{}", "None", ""),
    "k_at_2": ("kscale", "2", "{}", "None", ""),
    "k_traced_3": ("kscale", "B.c(3)", "{}", "None", ""),
}


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    path = tmp_path_factory.mktemp("domains") / "domain_ops.py"
    body = NODES + "".join(_composite(name, *case) for name, case in CASES.items())
    body += _NESTED
    path.write_text(textwrap.dedent(body))
    return {o.name: o for o in load_file(path)}


# A composite of a composite: the inner one passes its own positive u on to pscale's s; the outer one
# calls the inner one at u = -3, so the inner composite's certificate "for every u > 0" does not apply.
_NESTED = '''

@op(inputs={"x": ("n",)}, output=("n",), nodes={"f": pscale}, proofs=("compositional",),
    params={"u": Param(Fraction(3), positive=True)}, dims=[{"n": 2}])
def inner(B, x, u, nodes):
    return nodes.f(x, s=u)


@inner.defvjp
def _(B, x, u, dy, nodes):
    return nodes.f.vjp(x, dy, s=u)


@op(inputs={"x": ("n",)}, output=("n",), nodes={"g": inner}, proofs=("compositional",), dims=[{"n": 2}])
def outer_at_minus_3(B, x, nodes):
    return nodes.g(x, u=-3)


@outer_at_minus_3.defvjp
def _(B, x, dy, nodes):
    return nodes.g.vjp(x, dy, u=-3)


@op(inputs={"x": ("n",)}, output=("n",), nodes={"g": inner}, proofs=("compositional",), dims=[{"n": 2}])
def outer_at_3(B, x, nodes):
    return nodes.g(x, u=3)


@outer_at_3.defvjp
def _(B, x, dy, nodes):
    return nodes.g.vjp(x, dy, u=3)
'''


def _prove(ops, name):
    return prove_compositional(ops[name], "vjp[x]", {"n": 2})


def _outside(cert) -> list[dict]:
    return [n for n in cert.evidence["nodes"] if n.get("outside_domain")]


# ------------------------------------------------------------------ outside the domain: not proved
@pytest.mark.parametrize("name", ["at_minus_3", "at_c_minus_3", "at_minus_half", "own_positive_negated",
                                  "own_structural_minus_3", "at_its_default_minus_3"])
def test_a_node_called_below_its_positive_domain_fails_the_composite(ops, name):
    """The node's "for every s > 0" certificate does not apply at s <= 0; proved at exactly the value
    used, it fails, and so does the real composite (which the numeric tier fails too)."""
    cert = _prove(ops, name)
    assert cert.verdict == "failed", cert.evidence
    assert cert.evidence["witness"]["in"] == "node f"
    (node,) = cert.evidence["nodes"]
    assert node["verdict"] == "failed" and node["outside_domain"][0]["declared"] == "s > 0"


def test_the_headline_case_names_node_param_value_and_domain(ops):
    cert = _prove(ops, "at_minus_3")
    (out,) = cert.evidence["domains"]
    assert (out["node"], out["param"], out["value"], out["declared"]) == ("f", "s", "-3", "s > 0")
    assert out["certificate"] == "at s = -3 exactly"


def test_a_composite_param_wider_than_the_node_s_domain_is_not_covered(ops):
    """A composite param declared symbolic without positive=True, passed to a positive node param: the
    composite claims every real t, the node's certificate only t > 0. The node is then held to every
    real value -- and fails there."""
    cert = _prove(ops, "own_real")
    assert cert.verdict != "proved-compositional", cert.evidence
    (out,) = cert.evidence["domains"]
    assert (out["param"], out["value"], out["certificate"]) == ("s", "t", "for every real s")
    (node,) = cert.evidence["nodes"]
    assert node["verdict"] == "failed" and node["params"] == {"s": "every real value"}


def test_a_value_computed_from_inputs_is_not_covered_by_a_positive_domain(ops):
    cert = _prove(ops, "from_nondiff")
    assert cert.verdict != "proved-compositional", cert.evidence
    assert cert.evidence["domains"][0]["value"] == "w[0]"


def test_a_composite_of_a_composite_called_outside_the_inner_domain_fails(ops):
    cert = _prove(ops, "outer_at_minus_3")
    assert cert.verdict == "failed", cert.evidence
    (node,) = cert.evidence["nodes"]
    assert node["op"] == "inner" and node["rests_on"] == "compositional" and node["params"] == {"u": -3}


# ------------------------------------------------------------------ structural params: the exact value
def test_a_structural_param_is_certified_at_exactly_the_value_used(ops):
    cert = _prove(ops, "k_at_3")
    assert cert.verdict == "failed", cert.evidence
    assert cert.evidence["nodes"][0]["params"] == {"k": 3}


def test_a_traced_value_for_a_structural_param_is_not_covered(ops):
    """B.c(3) reaching a structural param: no certificate is at "a backend constant", and the one at
    the default k = 2 certainly is not; the composite is inconclusive and says why."""
    cert = _prove(ops, "k_traced_3")
    assert cert.verdict == "inconclusive", cert.evidence
    (out,) = cert.evidence["domains"]
    assert (out["node"], out["param"], out["value"]) == ("f", "k", "3")
    assert "structural" in out["declared"] and out["certificate"] == "none"
    assert "f" in cert.evidence["reason"] and "k" in cert.evidence["reason"]


# ------------------------------------------------------------------ correct twins: still proved
@pytest.mark.parametrize("name", ["at_3", "at_three_halves", "own_positive", "own_positive_doubled_plus_1",
                                  "real_from_nondiff", "k_at_2", "outer_at_3"])
def test_a_node_called_inside_its_domain_is_proved_compositionally(ops, name):
    cert = _prove(ops, name)
    assert cert.verdict == "proved-compositional", cert.evidence
    assert not _outside(cert) and not cert.evidence.get("domains")


def test_inside_the_domain_the_node_rests_on_its_own_symbolic_certificate(ops):
    """s = 3 is covered by the proof for every s > 0: no proof at s = 3 is made."""
    (node,) = _prove(ops, "at_3").evidence["nodes"]
    assert node["params"] == {} and node["verdict"] == "proved"


def test_zero_is_outside_a_positive_domain_and_rests_on_a_proof_at_zero(ops):
    """sqrt(0*0) = 0, so the node is right at s = 0 -- but that is a proof at s = 0, not the one for
    s > 0: the certificate lists the exact value it rests on."""
    cert = _prove(ops, "at_zero")
    assert cert.verdict == "proved-compositional", cert.evidence
    (node,) = cert.evidence["nodes"]
    assert node["params"] == {"s": 0} and node["outside_domain"][0]["certificate"] == "at s = 0 exactly"


def test_a_node_right_beyond_its_declared_domain_rests_on_a_proof_for_every_real_value(ops):
    """Outside the domain is not refused outright: a node whose claim holds for every real s is proved
    so, and that certificate covers a value computed from inputs."""
    cert = _prove(ops, "any_from_nondiff")
    assert cert.verdict == "proved-compositional", cert.evidence
    (node,) = cert.evidence["nodes"]
    assert node["params"] == {"s": "every real value"} and node["verdict"] == "proved"
    assert node["outside_domain"][0]["certificate"] == "for every real s"


# A structural param is part of a node call's point by its value: a VJP called at another value than the
# forward's is called where the forward never was. Two objects with one repr (and no value equality),
# two long tuples that differ in one entry, or -0.0 and 0.0 (equal, yet not the same value), are two
# points; an object is refused as a structural value, and so is a subclass of int (it may redefine
# equality).
STRUCTURAL = '''
import math

from vjpcert import op, Param


class Table:
    """A structural param whose repr is not its value."""
    def __init__(self, total):
        self.total = total

    def __repr__(self):
        return "Table"


class IntTable(int):
    """An int that equals every other IntTable: its table rides along as an attribute."""
    def __new__(cls, total):
        t = super().__new__(cls, 1)
        t.total = total
        return t

    def __eq__(self, other):
        return isinstance(other, IntTable)

    def __hash__(self):
        return 0


T1, T2 = Table(1), Table(5)
I1, I2 = IntTable(1), IntTable(5)
W1, W2 = tuple([1] * 2000), tuple([1] * 1000 + [5] + [1] * 999)


def total(t):
    if type(t) is float:
        return 3 if math.copysign(1.0, t) > 0 else -3      # -0.0 == 0.0, yet they are two tables
    return t.total if isinstance(t, (Table, IntTable)) else sum(t)


@op(inputs={"x": ("n",)}, output=("n",), params={"t": Param(1, symbolic=False)}, dims=[{"n": 2}])
def by_table(B, x, t):
    return x * total(t)


@by_table.defvjp
def _(B, x, t, dy):
    return (dy * total(t),)


def _composite(name, first, second, back):
    @op(inputs={"x": ("n",)}, output=("n",), nodes={"f": by_table}, proofs=("compositional",), dims=[{"n": 2}],
        name=name)
    def composite(B, x, nodes):
        return nodes.f(x, t=first) + nodes.f(x, t=second)

    @composite.defvjp
    def _(B, x, dy, nodes):
        return (nodes.f.vjp(x, dy, t=first)[0] + nodes.f.vjp(x, dy, t=back)[0],)
    return composite


two_objects_wrong = _composite("two_objects_wrong", T1, T2, T1)    # the VJP at T1 twice: 2 dy, not 6 dy
two_ints_wrong = _composite("two_ints_wrong", I1, I2, I1)
two_tuples_wrong = _composite("two_tuples_wrong", W1, W2, W1)
two_tuples_right = _composite("two_tuples_right", W1, W2, W2)
two_zeros_wrong = _composite("two_zeros_wrong", -0.0, 0.0, -0.0)  # the VJP at -0.0 twice: -6 dy, not 0
two_zeros_right = _composite("two_zeros_right", -0.0, 0.0, 0.0)
'''


@pytest.fixture(scope="module")
def structural(tmp_path_factory):
    path = tmp_path_factory.mktemp("structural") / "structural_ops.py"
    path.write_text(STRUCTURAL)
    return {o.name: o for o in load_file(path)}


@pytest.mark.parametrize("name", ["two_objects_wrong", "two_ints_wrong", "two_tuples_wrong", "two_zeros_wrong"])
def test_a_vjp_called_at_another_structural_value_than_the_forward_is_never_proved(structural, name):
    cert = prove_compositional(structural[name], "vjp[x]", {"n": 2})
    assert cert.verdict == "failed", cert.evidence
    assert cert.evidence["witness"]


def test_an_object_is_refused_as_a_structural_value_and_long_tuples_are_told_apart(structural):
    refused = prove_compositional(structural["two_objects_wrong"], "vjp[x]", {"n": 2}).evidence["wiring"]
    assert refused["status"] == "unsupported" and "param t is a Table" in refused["reason"]
    subclass = prove_compositional(structural["two_ints_wrong"], "vjp[x]", {"n": 2}).evidence["wiring"]
    assert subclass["status"] == "unsupported" and "param t is a IntTable" in subclass["reason"]
    wrong = prove_compositional(structural["two_tuples_wrong"], "vjp[x]", {"n": 2}).evidence["wiring"]
    assert wrong["status"] == "failed"
    for name in ("two_tuples_right", "two_zeros_right"):
        right = prove_compositional(structural[name], "vjp[x]", {"n": 2})
        assert right.verdict == "proved-compositional", right.evidence
