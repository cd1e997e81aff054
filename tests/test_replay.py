"""The replay of a claim's traced calls in mpmath and on the float paths (core/replay.py): each of its
rules decides, and each can go red -- an interpreter that disagrees, one that runs at one point and
is refused at another, one that is refused everywhere (it computes nothing), a point that decides
nothing."""
import textwrap

import numpy as np
import pytest

from vjpcert.core import replay
from vjpcert.core.registry import SpecError, load_file
from vjpcert.symbolic.fixed.claims import trace_claim

HEAD = '''
import numpy as np
from vjpcert import op

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])
def sq(B, x):
    return x * x
'''


def _op(tmp_path, backward: str):
    path = tmp_path / "ops.py"
    path.write_text(textwrap.dedent(HEAD) + textwrap.dedent(f'''
@sq.defvjp
def _(B, x, dy):
    {backward}
'''))
    return load_file(path)[0]


def _calls(op, claim="vjp[x]"):
    """The claim's traced calls, recorded as trace_claim records them (the replay not yet run)."""
    seen = []
    real = replay.replay
    replay.replay = lambda op, claim, dims, calls, entropy=None: seen.extend(calls)
    try:
        trace_claim(op, claim, {"n": 3})
    finally:
        replay.replay = real
    return seen


def _x(op, calls, entropy, attempt=0):
    """x at the replay's point number ``attempt`` of this entropy."""
    leaves = replay._point(op, calls, np.random.default_rng([entropy, attempt]), positive=attempt > 0)
    return np.array([float(leaves[n.value]) for n in calls[0].values["x"]])


def _entropy_where(op, calls, pred):
    """An entropy whose first point (standard normals) satisfies pred(x)."""
    for entropy in range(1000):
        if pred(_x(op, calls, entropy)):
            return entropy
    raise AssertionError("no such entropy")


def test_an_honest_backward_is_replayed_in_every_interpreter(tmp_path):
    op = _op(tmp_path, "return (2 * x * dy,)")
    trace_claim(op, "vjp[x]", {"n": 3})                     # no error: mpmath, float64 and float32 agree


@pytest.mark.parametrize("backward, where", [
    ("return ((2 if x.dtype == object else 3) * x * dy,)", "float64"),
    ("return ((2 if x.dtype != np.float32 else 3) * x * dy,)", "float32"),
    ("return ((2 if 'mpf' not in type(x[0]).__name__ else 3) * x * dy,)", "mpmath"),
])
def test_an_interpreter_that_computes_another_function_is_named(tmp_path, backward, where):
    op = _op(tmp_path, backward)
    with pytest.raises(SpecError, match=f"computes another function in {where}"):
        trace_claim(op, "vjp[x]", {"n": 3})


def test_a_spec_refused_in_floats_at_every_point_computes_nothing_there_and_passes(tmp_path):
    op = _op(tmp_path, "return (2 * x * dy if x.dtype == object else np.sqrt(x, dtype=np.float16),)")
    trace_claim(op, "vjp[x]", {"n": 3})


def test_a_spec_refused_at_one_point_and_run_at_another_is_refused(tmp_path):
    """Refused where x[0] < 0 (the first point), right elsewhere: what it computes depends on more
    than the values it is given, so no point can stand for the others."""
    op = _op(tmp_path, "return (2 * x * dy if x.dtype == object or np.asarray(x).view(np.ndarray).tolist()[0] > 0 "
                       "else np.sqrt(x, dtype=np.float16),)")
    calls = _calls(op)
    entropy = _entropy_where(op, calls, lambda x: x[0] < 0)
    with pytest.raises(SpecError, match="refused at another"):
        replay.replay(op, "vjp[x]", {"n": 3}, calls, entropy=entropy)
    # the control: the same spec, every point positive, runs everywhere and agrees
    replay.replay(op, "vjp[x]", {"n": 3}, calls, entropy=_entropy_where(op, calls, lambda x: x[0] > 0))


def test_a_claim_no_point_decides_is_refused(tmp_path, monkeypatch):
    op = _op(tmp_path, "return (2 * x * dy,)")
    calls = _calls(op)

    def never(*args):
        raise replay._Undecided("the trace leaves the reals there")
    monkeypatch.setattr(replay, "_truth", never)
    with pytest.raises(SpecError, match="no random point decides"):
        replay.replay(op, "vjp[x]", {"n": 3}, calls)


def test_an_entropy_replays_the_same_points(tmp_path):
    op = _op(tmp_path, "return (2 * x * dy,)")
    calls = _calls(op)
    a, b = _x(op, calls, 7), _x(op, calls, 7)
    assert np.array_equal(a, b) and np.array_equal(a, a.astype(np.float32))   # float32-representable
    assert (_x(op, calls, 7, attempt=1) >= 0.5).all()           # later points: positive
