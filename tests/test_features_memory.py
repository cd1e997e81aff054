"""Which claims an op has (``max_shift_free``, ``at_the_kink``) comes from tracing its forward and
backward, remembered across processes (``core.features``) by everything the trace depends on. A stale
answer would drop a claim, so each thing it depends on is changed here and must be traced again."""
import json
import textwrap

import pytest

from vjpcert.core import features
from vjpcert.core.disk_cache import DiskCache
from vjpcert.ops import load_file

SPEC = '''
import json
import pathlib
from vjpcert import op

SETTINGS = pathlib.Path(__file__).with_name("settings.json")


@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}], check_dims={"n": 4})
def shifted(B, x):
    if json.loads(SETTINGS.read_text())["shift"]:       # read while the forward runs
        return B.exp(x - B.max_shift(x))
    return B.exp(x)

@shifted.defvjp
def _(B, x, dy):
    return (shifted(B, x) * dy,)
'''


@pytest.fixture
def memory(monkeypatch, tmp_path):
    monkeypatch.setenv("VJPCERT_CACHE_DIR", str(tmp_path / "cache"))
    traced = []
    monkeypatch.setattr(features, "_MEMORY", DiskCache("features.json", "1"))
    import vjpcert.core.tracing as tracing
    original = tracing.spec_features

    def counting(op, dims=None):
        traced.append(op.name)
        return original(op, dims)
    monkeypatch.setattr(tracing, "spec_features", counting)
    return traced


def _op(tmp_path, shift=True, spec=SPEC):
    (tmp_path / "settings.json").write_text(json.dumps({"shift": shift}))
    f = tmp_path / "my_ops.py"
    f.write_text(textwrap.dedent(spec))
    return load_file(f)[0]


def _fresh_process(monkeypatch):
    """What another process finds: only the file on disk."""
    monkeypatch.setattr(features, "_MEMORY", DiskCache("features.json", "1"))


def test_a_second_process_reads_the_claims_from_memory(tmp_path, memory, monkeypatch):
    assert "max_shift_free" in _op(tmp_path).claims() and memory == ["shifted"]
    _fresh_process(monkeypatch)
    assert "max_shift_free" in _op(tmp_path).claims() and memory == ["shifted"]     # not traced again


def test_a_data_file_the_trace_read_that_changed_is_traced_again(tmp_path, memory, monkeypatch):
    assert "max_shift_free" in _op(tmp_path, shift=True).claims()
    _fresh_process(monkeypatch)
    assert "max_shift_free" not in _op(tmp_path, shift=False).claims() and memory == ["shifted", "shifted"]


def test_an_edited_spec_is_traced_again(tmp_path, memory, monkeypatch):
    assert "max_shift_free" in _op(tmp_path).claims()
    _fresh_process(monkeypatch)
    edited = SPEC.replace('return B.exp(x - B.max_shift(x))', 'return B.exp(x)')
    assert "max_shift_free" not in _op(tmp_path, spec=edited).claims() and len(memory) == 2


def test_a_mutant_twin_is_traced_for_itself(tmp_path, memory):
    """A twin has its op's files and another backward: the functions traced are in the key."""
    op = _op(tmp_path, spec=SPEC + '''
@shifted.mutant("shift_in_the_backward", kills=["vjp[x]"])
def _(B, x, dy):
    return (B.exp(x - B.max_shift(x)) * 0 * dy,)
''')
    assert "max_shift_free" in op.claims()
    twin = op.with_mutant(op.mutants[0])
    del twin._features_key                   # what a twin made in another process would have
    assert twin.uses_max_shift() and memory == ["shifted", "shifted~shift_in_the_backward"]


def test_without_the_data_check_the_memory_would_keep_a_claim_the_op_no_longer_has(tmp_path, memory, monkeypatch):
    """The control: with the check of what the trace read switched off, the memory answers for a data
    file that changed, and the op keeps max_shift_free after it stopped calling B.max_shift."""
    assert "max_shift_free" in _op(tmp_path, shift=True).claims()
    _fresh_process(monkeypatch)
    monkeypatch.setattr("vjpcert.core.sources.current_sha256", lambda base, op, sources: (
        json.loads(json.dumps(features._MEMORY.get(features._key(op))))[0], []))
    assert "max_shift_free" in _op(tmp_path, shift=False).claims() and memory == ["shifted"]
