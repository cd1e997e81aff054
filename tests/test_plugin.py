"""The pytest plugin, as a user meets it: loaded by entry point, readable failures, certificates reused
while current."""
import re
import shutil

WRONG = '''
from vjpcert.core.registry import op

@op(inputs={"x": ("n",)}, output=("n",), dims=[{"n": 3}])
def cube(B, x):
    return x * x * x

@cube.defvjp
def cube_vjp(B, x, dy):
    return (2 * x * x * dy,)          # should be 3 x^2 dy
'''

TESTS = '''
import numpy as np
from pathlib import Path
OPS = str(Path(__file__).with_name("wrong_ops.py"))

def test_proof_fails_readably(vjpcert):
    vjpcert.proved(OPS + "::cube")

def test_kernel_fails_readably(vjpcert):
    def bad_softmax(x):
        e = np.exp(x)
        return e / e.sum(-1, keepdims=True) * np.float32(1.001)   # 0.1% off: above float32's bound
    vjpcert.matches_spec("softmax", bad_softmax, kind="forward")
'''


def test_the_plugin_is_registered_by_entry_point():
    from importlib import metadata
    eps = [e for e in metadata.entry_points(group="pytest11") if e.name == "vjpcert"]
    assert eps and eps[0].value == "vjpcert.pytest_plugin"


# --- reusing current certificates -----------------------------------------------------------------
# A user's suite proves and checks the same ops on every run; the plugin keeps the certificates it
# derived and reuses those that the planner's staleness rule (vjpcert.plan.is_current) calls current.
# The work is counted by a spy on vjpcert.runner.execute (what runs one claim), independently of what
# the plugin says it did.

RIGHT = WRONG.replace("2 * x * x * dy,)          # should be 3 x^2 dy", "3 * x * x * dy,)")

SPY = '''
import json
from pathlib import Path
import vjpcert.runner

_real = vjpcert.runner.execute
CALLS = []

def _counting(task):
    CALLS.append(task.label())
    return _real(task)

vjpcert.runner.execute = _counting

def pytest_sessionfinish(session):
    log = Path(str(session.config.rootpath)) / "calls.json"
    runs = json.loads(log.read_text()) if log.exists() else []
    log.write_text(json.dumps(runs + [CALLS]))
'''

# (the checks name small dims: the default adds long rows of 1,025 entries, seconds per run that say
# nothing about reuse; three distinct keys: n = 5 at 20 and 30 digits, n = 3 at 20)
FIVE = '''
from pathlib import Path
OPS = str(Path(__file__).with_name("user_ops.py")) + "::cube"

def test_proved(vjpcert):
    vjpcert.proved(OPS, general=False)

def test_proved_every_size(vjpcert):
    vjpcert.proved(OPS)

def test_checked(vjpcert):
    vjpcert.checked(OPS, dims={"n": 5}, dps=20)

def test_checked_more_digits(vjpcert):
    vjpcert.checked(OPS, dims={"n": 5}, dps=30)

def test_checked_at_n3(vjpcert):
    vjpcert.checked(OPS, dims={"n": 3}, dps=20)
'''


def _calls(pytester) -> list[list[str]]:
    import json
    return json.loads((pytester.path / "calls.json").read_text())


def _run(pytester, *args):
    return pytester.runpytest_subprocess("-q", "-p", "no:randomly", *args)


def test_a_second_run_derives_nothing_and_an_edited_spec_is_derived_again(pytester):
    """One user's day: a run, the same run again (nothing derived), the same run without the cache
    (everything derived: the negative control of the reuse), an edit that makes the backward wrong
    (derived again, failed), and that failing run again (the failed certificates reused, still failed)."""
    pytester.makepyfile(user_ops=RIGHT, test_user=FIVE, conftest=SPY)
    first = _run(pytester)
    first.assert_outcomes(passed=5)
    second = _run(pytester)
    second.assert_outcomes(passed=5)
    derived, again = _calls(pytester)
    assert derived and again == [], again
    cache = pytester.path / ".pytest_cache" / "d" / "vjpcert"
    assert list(cache.rglob("*.json")), "the default cache is pytest's own cache folder"
    # what the plugin says agrees with the spy (a claim two tests share is derived once per session)
    said = re.search(r"vjpcert: reused (\d+) current certificates, derived (\d+)", first.stdout.str())
    assert said and int(said[2]) == len(derived)
    out = second.stdout.str()
    assert f"reused {int(said[1]) + int(said[2])} current certificates, derived 0" in out and str(cache) in out
    # negative control: with the cache switched off the same run derives everything again
    _run(pytester, "--vjpcert-no-cache").assert_outcomes(passed=5)
    uncached = _calls(pytester)[2]
    assert len(uncached) == int(said[1]) + int(said[2]) and set(uncached) == set(derived)
    spec = pytester.path / "user_ops.py"
    spec.write_text(WRONG)                       # a wrong backward, written into the same file at once
    edited = _run(pytester)
    edited.assert_outcomes(failed=5)
    assert _calls(pytester)[3], "the edited spec's claims are derived again"
    assert "witness" in edited.stdout.str()
    # the very same failing run again reuses the failed certificates, and fails
    again = _run(pytester)
    again.assert_outcomes(failed=5)
    assert _calls(pytester)[4] == [] and "witness" in again.stdout.str()


def test_the_cache_folder_is_configurable_and_named(pytester):
    pytester.makepyfile(user_ops=RIGHT, test_user=FIVE.split("def test_proved_every_size")[0], conftest=SPY)
    pytester.makeini("[pytest]\nvjpcert_cache = certs_from_ini\n")
    first = _run(pytester, "-v")
    first.assert_outcomes(passed=1)
    assert list((pytester.path / "certs_from_ini").rglob("*.json"))
    assert str(pytester.path / "certs_from_ini") in first.stdout.str()      # named in the header
    _run(pytester, "--vjpcert-cache", "certs_from_cli").assert_outcomes(passed=1)
    assert list((pytester.path / "certs_from_cli").rglob("*.json"))
    assert _calls(pytester)[1], "a folder of its own: derived there"
    # without pytest's cache (a read-only checkout) nothing is written unless a folder is named
    pytester.makeini("[pytest]\n")
    shutil.rmtree(pytester.path / ".pytest_cache")
    _run(pytester, "-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert not (pytester.path / ".pytest_cache").exists()


def _tamper(cache, forge: bool) -> int:
    """Turn every failed certificate under ``cache`` into a proof; ``forge``: with a fresh digest."""
    import json

    from vjpcert.core.certificate import record_digest
    n = 0
    for path in cache.rglob("*.json"):
        record = json.loads(path.read_text())
        if record["verdict"] != "failed":
            continue
        record["verdict"], record["trust"] = "proved", "exact"
        record["evidence"].pop("witness", None)
        if forge:
            record["digest"] = record_digest(record)
        path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        n += 1
    return n


def test_a_tampered_certificate_is_not_trusted(pytester):
    pytester.makepyfile(user_ops=WRONG, test_user=FIVE.split("def test_proved_every_size")[0], conftest=SPY)
    _run(pytester, "--vjpcert-cache", "certs").assert_outcomes(failed=1)
    cache = pytester.path / "certs"
    assert _tamper(cache, forge=False) == 1       # a hand-edited verdict: its digest no longer matches
    _run(pytester, "--vjpcert-cache", "certs").assert_outcomes(failed=1)
    assert _calls(pytester)[1], "an edited certificate is derived again"
    assert _tamper(cache, forge=True) == 1        # an edit with its digest made again
    _run(pytester, "--vjpcert-cache", "certs").assert_outcomes(failed=1)
    assert _calls(pytester)[2], "a certificate the plugin did not write as it is is derived again"


# --- failures point at the user's test, not at the plugin -----------------------------------------

def test_a_failure_shows_the_users_test_and_the_witness_not_the_plugin(pytester):
    pytester.makepyfile(wrong_ops=WRONG, test_user=TESTS)
    result = _run(pytester)                       # a subprocess: the plugin comes from its entry point
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "CertificationError" in out and "failed" in out
    assert "witness" in out and "residual" in out and '"x[' in out
    assert "error" in out and "> bound" in out and "softmax forward" in out
    assert "test_user.py" in out and "vjpcert.proved(OPS" in out
    assert "pytest_plugin.py" not in out and "testing.py" not in out, out


def test_a_crash_inside_vjpcert_still_shows_where(pytester):
    # negative control: only certification failures hide the plugin's frames; a bug (here, a spec
    # file that does not exist) keeps its whole traceback
    pytester.makepyfile(test_user='def test_x(vjpcert):\n    vjpcert.proved("missing.py::f")\n')
    result = _run(pytester)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "SpecError" in out and "testing.py" in out


def test_a_spec_helper_that_pytest_rewrites_is_not_taken_for_kept_state(pytester):
    """A helper module named like a test file is loaded by pytest's assertion-rewriting hook, one loader
    for every test module, whose caches fill as anything imports while a claim runs: the op is proved,
    not refused for state its loader keeps (a counter spec code binds there is: tests/test_kept_state.py)."""
    ops = RIGHT.replace("from vjpcert.core.registry import op", "from vjpcert.core.registry import op\nfrom test_helpers import K")
    pytester.makepyfile(test_helpers="K = 3\n", user_ops=ops.replace("3 * x * x * dy,)", "K * x * x * dy,)"),
                        test_user='from pathlib import Path\nimport test_helpers\n\n'
                                  'def test_proved(vjpcert):\n'
                                  '    assert type(test_helpers.__loader__).__name__ == "AssertionRewritingHook"\n'
                                  '    vjpcert.proved(str(Path(__file__).with_name("user_ops.py")) + "::cube", general=False)\n')
    _run(pytester).assert_outcomes(passed=1)
