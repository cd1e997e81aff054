"""The example notebook runs headless; a failing cell fails the suite."""
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="pip install -e '.[test]' installs nbformat/nbclient")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "tour.ipynb"


@pytest.mark.slow      # a Jupyter kernel running the whole tour; its commands are tested one by one elsewhere
def test_tour_notebook_executes():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()      # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert any("text/markdown" in o.get("data", {}) for o in outputs), "certificates did not render"
    assert any("text/latex" in o.get("data", {}) for o in outputs), "the Jacobian did not render as LaTeX"
