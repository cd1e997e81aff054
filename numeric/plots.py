"""The picture users know: gradient error against finite-difference step, for float64 central
differences and for mpmath, with each mutant's own error drawn as a line. A mutant below the float64
curve's floor is one no float64 finite-difference check can see, at any step."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vjpcert.numeric import settings as tol
from vjpcert.numeric.sampling import cotangent, sample_point, sample_points
from vjpcert.core.backends import F64, MpmathBackend
from vjpcert.core.certificate import atomic_write
from vjpcert.core.registry import Op


def _f64_values(op: Op, point: dict) -> dict:
    values = {k: np.asarray(v, dtype=np.float64) for k, v in point.items()}
    values.update({k: (F64.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()})
    return values


def fd_curves(op: Op, dims: dict, *, wrt: str | None = None, case: str = "random", seed: int = 0,
              dps: int = tol.DEFAULT_DPS) -> dict:
    """Relative error of <v, J u> by central differences, against the exact value (mpmath.diff at
    ``dps``), over steps h, in float64 and in mpmath; and each mutant's relative deviation."""
    wrt = wrt or next(iter(op.inputs))
    dims = op.resolve_dims(dims)
    point = sample_point(op, dims, case, seed)
    y_shape = op.shape(op.output, dims)
    v = cotangent(y_shape, seed, op.name, case)
    u = cotangent(point[wrt].shape, seed, op.name, case, "u", 0)
    B = MpmathBackend(dps)
    ctx = B.ctx
    mp = {k: B.convert(a) for k, a in point.items()}
    mp.update({k: (B.c(p.default) if p.symbolic else p.default) for k, p in op.params.items()})
    v_mp, u_mp = B.convert(v), B.convert(u)

    def phi_mp(h):
        return sum((v_mp * np.asarray(op.bind(op.forward, B, {**mp, wrt: mp[wrt] + h * u_mp}))).ravel())

    exact = ctx.diff(phi_mp, 0)
    # relative to |exact|, or to the derivative's natural size where the exact value is ~0 (large
    # logits make attention's derivative vanish to exp(-1000))
    y0 = np.asarray(op.bind(op.forward, B, mp), dtype=object)
    natural = max(abs(t) for t in (v_mp * y0).ravel()) * max(abs(t) for t in u_mp.ravel()) / \
        max(abs(t) for t in mp[wrt].ravel())
    denom = max(abs(exact), natural * ctx.mpf(10) ** -dps) or ctx.mpf(1)
    f64 = _f64_values(op, point)

    def phi_64(h):
        return float((v * op.bind(op.forward, F64, {**f64, wrt: f64[wrt] + h * u})).sum())

    ks64 = np.arange(1.0, 15.01, 0.25)
    with np.errstate(all="ignore"):      # float64 overflows at large logits: those points are NaN
        err64 = [float(abs((phi_64(10**-k) - phi_64(-10**-k)) / (2 * 10**-k) - float(exact)) / float(denom))
                 for k in ks64]
    ksmp = np.arange(1.0, dps - 1.99, 1.0)
    errmp = []
    for k in ksmp:
        h = ctx.mpf(10) ** (-int(k))
        errmp.append(float(abs((phi_mp(h) - phi_mp(-h)) / (2 * h) - exact) / denom))
    idx = list(op.inputs).index(wrt)
    mutants = {}
    for m in op.mutants:
        if m.replaces != "vjp" or m.refused:        # a refused mutant is bad input, not a line
            continue
        cot = np.asarray(op.bind(m.fn, B, {**mp, "dy": v_mp})[idx], dtype=object)
        dev = abs(sum((cot * u_mp).ravel()) - exact) / denom
        if dev > 0:
            mutants[m.name] = float(dev)
    best64 = int(np.nanargmin(err64)) if np.isfinite(err64).any() else 0
    bestmp = int(np.argmin(errmp))
    return {"op": op.name, "wrt": wrt, "dims": dims, "case": case, "seed": seed, "exact": str(exact),
            "h64": [10**-k for k in ks64], "err64": err64, "hmp": [10.0**-k for k in ksmp], "errmp": errmp,
            "best64": {"h": 10**-ks64[best64], "rel_error": err64[best64]},
            "bestmp": {"h": 10.0**-ksmp[bestmp], "rel_error": errmp[bestmp]},
            "mutants": mutants}


def plot_fd_curves(panels: list[dict], path: Path) -> Path:
    """One panel per input case: float64 and mpmath error over the step, mutants as dashed lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), dpi=100, sharey=True)
    axes = np.atleast_1d(axes)
    for ax, data in zip(axes, panels):
        ax.loglog(data["h64"], np.maximum(data["err64"], 1e-60), "o-", ms=2.5, label="float64 central diff.")
        ax.loglog(data["hmp"], np.maximum(data["errmp"], 1e-60), "s-", ms=2.5,
                  label=f"mpmath central diff. ({len(data['hmp']) + 2} digits)")
        for i, (name, dev) in enumerate(sorted(data["mutants"].items(), key=lambda kv: kv[1])):
            ax.axhline(dev, ls="--", lw=0.8, color=f"C{2 + i % 7}", label=f"mutant {name}")
        ax.set_xlabel("finite-difference step h")
        ax.set_title(f"{data['case']} inputs", fontsize=10)
        ax.invert_xaxis()
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=6, loc="lower left")
    axes[0].set_ylabel(f"relative error of <v, J u>, d/d{panels[0]['wrt']}")
    fig.suptitle(f"{panels[0]['op']}: gradient error against finite-difference step", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)
    return path


def write_fd_plot(op: Op, root: Path, seed: int = 0) -> Path:
    """reports/plots/<op>-fd.png and its data as JSON."""
    # a case with no point away from the op's kinks (ties everywhere) has no curve to draw
    cases = [case for case in tol.CASES if case in sample_points(op, op.check_dims, [case], seed)[0]]
    panels = [fd_curves(op, op.check_dims, case=case, seed=seed) for case in cases]
    root = Path(root) / "plots"
    summary = [{k: p[k] for k in ("case", "wrt", "dims", "best64", "bestmp", "mutants")} for p in panels]
    atomic_write(root / f"{op.base_name}-fd.json", json.dumps(summary, indent=1) + "\n")
    return plot_fd_curves(panels, root / f"{op.base_name}-fd.png")
