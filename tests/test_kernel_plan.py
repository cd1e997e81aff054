"""The kernel tier's plan without importing the kernels: kept on disk by the bytes of the kernel
package's files and the mode, equal to the registry's own answer, made again after any edit there."""
import json
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("numba")

from vjpcert import tiers  # noqa: E402
from vjpcert.cuda_kernels import check  # noqa: E402
from vjpcert.specs import builtin_ops  # noqa: E402


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VJPCERT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_kept_plan_is_the_registry_s(cache):
    ops = builtin_ops()
    mode = check.detect_mode()
    first = {name: tiers.kernel_plan(op) for name, op in ops.items()}
    assert sum(len(v) for v in first.values()) > 10                     # kernels were planned at all
    for name, op in ops.items():
        direct = {c: check.kernel_launches(op, mode, c) for c in check.kernel_claims(op)}
        assert first[name] == direct, name
        assert tiers.kernel_plan(op) == direct, name                   # read back from the file
    assert len(list((cache / "kernel-plans").glob("*.json"))) == 1


def test_the_kept_plan_is_what_is_read(cache):
    """Negative control: the file is really what planning reads (so its key must cover what it says)."""
    op = builtin_ops()["softmax"]
    tiers.kernel_plan(op)
    path = tiers.kernel_plan_file(Path(check.__file__).parent, check.detect_mode())
    plans = json.loads(path.read_text())
    plans["softmax"] = [["kernel:made_up", [[{"rows": 1, "n": 1}, None]]]]
    path.write_text(json.dumps(plans))
    assert tiers.kernel_plan(op) == {"kernel:made_up": [({"rows": 1, "n": 1}, None)]}


def test_any_edit_of_a_kernel_file_and_the_mode_change_the_key(tmp_path, cache):
    folder = tmp_path / "cuda_kernels"
    shutil.copytree(Path(check.__file__).parent, folder, ignore=shutil.ignore_patterns("__pycache__"))
    key = tiers.kernel_plan_file(folder, "simulator")
    assert key == tiers.kernel_plan_file(folder, "simulator")
    assert key != tiers.kernel_plan_file(folder, "gpu")
    with open(folder / "softmax.py", "a") as f:
        f.write("# a comment is an edit too\n")
    assert key != tiers.kernel_plan_file(folder, "simulator")
    (folder / "new_kernels.py").write_text("KERNELS = []\n")
    assert len({key, tiers.kernel_plan_file(folder, "simulator")}) == 2


def test_planning_a_kernel_tier_imports_no_numba_cuda_once_kept(cache):
    import subprocess
    code = ("import sys; from vjpcert.specs import builtin_ops; from vjpcert.tiers import kernel_plan; "
            "[kernel_plan(op) for op in builtin_ops().values()]; print('numba.cuda' in sys.modules)")
    env = {**__import__("os").environ, "VJPCERT_CACHE_DIR": str(cache)}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True) for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["True", "False"], [r.stderr[-500:] for r in runs]
