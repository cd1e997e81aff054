"""Proofs on a real Dask cluster (a local one, on loopback), through --scheduler."""
import json

import pytest

import optional

distributed = optional.importorskip("distributed", reason="pip install -e '.[test]' installs dask[distributed]")

from vjpcert.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as c:
        yield c


def test_proofs_run_on_a_dask_cluster(cluster, tmp_path):
    reports = tmp_path / "reports"
    code = main(["prove", "softmax", "gelu_tanh", "--scheduler", cluster.scheduler_address,
                 "--reports", str(reports), "--quiet"])
    assert code == 0
    recs = [json.loads(p.read_text()) for p in reports.rglob("*.json") if "certificates" in p.parts]
    from vjpcert.plan import plan_op
    planned = len(plan_op("softmax", ("symbolic",))) + len(plan_op("gelu_tanh", ("symbolic",)))
    assert len(recs) == planned and all(r["verdict"].startswith("proved") for r in recs)


def test_an_unreachable_scheduler_is_one_clear_error(tmp_path, capsys):
    code = main(["prove", "softmax", "--scheduler", "tcp://127.0.0.1:9", "--reports", str(tmp_path / "r")])
    assert code == 2 and "cannot reach the scheduler" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
