"""`vjpcert mutate`: every checker against every wrong backward, and against every correct one.

Columns: our symbolic tier (exact proofs), our numeric tier (mpmath, 50 digits), float64 finite
differences with gradcheck's defaults, ``torch.autograd.gradcheck`` itself (when PyTorch is
installed) and ``jax.test_util.check_grads`` (when JAX is). Rows: every mutant of every op, and each
op's correct backward (a kill there is a *false* kill). Written as JSON, Markdown and a picture
under reports/mutation/; the exit code is 1 if a mutant survives every tier or a correct backward is
killed by one of our tiers.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from vjpcert.core.certificate import atomic_write
from vjpcert.ops import OpRef, select_ops

# the kill matrix's columns: our two tiers that judge backwards, and the peers people use today
COLUMNS = ("symbolic", "numeric", "fd64", "gradcheck", "jax")
OURS = ("symbolic", "numeric")


def _refused(op, dims) -> str | None:
    """Our tiers validate a spec before running it (as `vjpcert all` plans it): a construct no
    checker can follow faithfully is refused as bad input, which kills the mutant."""
    from vjpcert.core.registry import SpecError
    from vjpcert.core.validate import validate
    try:
        validate(op, dims)
    except SpecError as exc:
        return f"refused: {exc.problem}"[:200]
    return None


def _suspects_first(op, claims: list[str], dims: dict) -> list[str]:
    """The claims with the ones whose wiring (the composite's own code, nodes as arbitrary functions:
    hundredths of a second) is not proved first. A wrong composite then fails on its own witness
    before any node's proof is spent on the claims before it; the verdicts are the same in any order."""
    from vjpcert.core.budget import run_with_budget
    from vjpcert.symbolic.composition.wiring import prove_wiring_claims
    vjps = [c for c in claims if c.startswith("vjp[")]
    out = run_with_budget(lambda: prove_wiring_claims(op, vjps, op.resolve_dims(dims)), 30)
    if out.status != "ok":
        return claims
    return sorted(claims, key=lambda c: out.value.get(c, {}).get("status", "proved") == "proved")


def _symbolic(op) -> tuple[bool, str]:
    from vjpcert.symbolic.composition.compose import prove_compositional
    from vjpcert.symbolic.fixed.prover import prove_claim
    dims = op.dims[-1]
    refused = _refused(op, dims)
    if refused:
        return True, refused
    claims = op.claims()
    if "monolithic" not in op.proofs:
        claims = _suspects_first(op, claims, dims)
    from vjpcert.core.registry import SpecError
    for claim in claims:
        try:
            if "monolithic" in op.proofs or not claim.startswith("vjp["):
                cert = prove_claim(op, claim, dims)
            else:
                cert = prove_compositional(op, claim, dims)
        except SpecError as exc:        # its trace is not what another interpreter computes (core.replay)
            return True, f"refused: {exc.problem}"[:200]
        if cert.verdict == "failed":
            return True, claim
    return False, ""


def _numeric(op) -> tuple[bool, str]:
    from vjpcert.numeric.check import check_claim, numeric_claims
    refused = _refused(op, op.check_dims)
    if refused:
        return True, refused
    for claim in numeric_claims(op):
        if check_claim(op, claim, op.check_dims).verdict == "failed":
            return True, claim
    return False, ""


def _fd64(op) -> tuple[bool, str]:
    from vjpcert.numeric.fd64 import fd64_check
    ok, worst = fd64_check(op, op.check_dims)
    return (not ok), (f"d{worst['input']}[{worst['entry']}]" if not ok else "")


def _gradcheck(op) -> tuple[bool, str] | None:
    try:
        from vjpcert.numeric.torch_bridge import gradcheck
    except ImportError:
        return None
    from vjpcert.numeric.sampling import sample_point
    return (not gradcheck(op, sample_point(op, op.check_dims, "random", 0))), ""


def _jax(op):
    try:
        from vjpcert.numeric.jax_bridge import check_grads
    except ImportError:
        return None          # JAX not installed: the column says so
    from vjpcert.numeric.sampling import sample_point
    return (not check_grads(op, sample_point(op, op.check_dims, "random", 0))), ""


def _last_line(exc: Exception) -> str:
    """What an exception says, without a traceback it carries in its message (JAX's callback errors
    hold the callback's whole stack, with this machine's paths)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def run_row(ref: OpRef) -> dict:
    """One row of the matrix: a mutant (or the correct op) under every tier, with times."""
    op = ref.resolve()
    row = {"op": ref.name, "mutant": ref.mutant or "(correct)", "tiers": {}}
    for tier, fn in (("symbolic", _symbolic), ("numeric", _numeric), ("fd64", _fd64),
                     ("gradcheck", _gradcheck), ("jax", _jax)):
        t = time.perf_counter()
        try:
            out = fn(op)
        except Exception as exc:    # a checker that crashes on a mutant did not kill it
            out = (False, f"error: {type(exc).__name__}: {_last_line(exc)}"[:200])
        seconds = round(time.perf_counter() - t, 3)
        row["tiers"][tier] = None if out is None else {"killed": bool(out[0]), "by": out[1], "seconds": seconds}
    return row


def _rows(targets: list[str]) -> list[OpRef]:
    refs = []
    for ref, op in select_ops(targets):
        refs.append(ref)
        refs += [OpRef(ref.name, ref.file, m.name) for m in op.mutants]
    return refs


def summarise(rows: list[dict]) -> dict:
    mutants = [r for r in rows if r["mutant"] != "(correct)"]
    correct = [r for r in rows if r["mutant"] == "(correct)"]
    out = {"mutants": len(mutants), "ops": len(correct)}
    for tier in COLUMNS:
        col = [r["tiers"][tier] for r in mutants if r["tiers"][tier] is not None]
        if not col:
            out[tier] = None
            continue
        false = [r["op"] for r in correct if r["tiers"][tier] and r["tiers"][tier]["killed"]]
        out[tier] = {"killed": sum(c["killed"] for c in col), "of": len(col),
                     "kill_rate": round(sum(c["killed"] for c in col) / len(col), 3),
                     "false_kills": false, "seconds": round(sum(c["seconds"] for c in col), 2)}
    out["survive_every_tier"] = [f"{r['op']}~{r['mutant']}" for r in mutants
                                 if not any(t and t["killed"] for t in r["tiers"].values())]
    out["survive_our_tiers"] = [f"{r['op']}~{r['mutant']}" for r in mutants
                                if not any(r["tiers"][t] and r["tiers"][t]["killed"] for t in OURS)]
    out["survive_fd64"] = [f"{r['op']}~{r['mutant']}" for r in mutants
                           if r["tiers"]["fd64"] and not r["tiers"]["fd64"]["killed"]]
    if out.get("gradcheck") and out.get("symbolic"):
        out["time_ratio_symbolic_vs_gradcheck"] = round(out["symbolic"]["seconds"] / max(out["gradcheck"]["seconds"], 1e-9), 2)
        out["time_ratio_numeric_vs_gradcheck"] = round(out["numeric"]["seconds"] / max(out["gradcheck"]["seconds"], 1e-9), 2)
    return out


def render_md(rows: list[dict], summary: dict) -> str:
    cols = [t for t in COLUMNS if summary.get(t)]
    head = {"symbolic": "ours: symbolic", "numeric": "ours: mpmath 50", "fd64": "float64 FD (gradcheck defaults)",
            "gradcheck": "torch gradcheck", "jax": "jax check_grads"}
    lines = ["# Mutation suite: kill matrix", "",
             "Every wrong backward (mutant) of every op under every checker; `killed` means the checker "
             "reported it wrong. Rows marked (correct) are the real backwards: a kill there is a false kill.",
             "Command: `vjpcert mutate`.", "", "| checker | killed | kill rate | false kills | seconds |",
             "|---|---|---|---|---|"]
    for t in COLUMNS:
        s = summary.get(t)
        lines.append(f"| {head[t]} | " + (f"{s['killed']}/{s['of']} | {s['kill_rate']:.0%} | {len(s['false_kills'])} | {s['seconds']}"
                                           if s else "not installed | - | - | -") + " |")
    if "time_ratio_symbolic_vs_gradcheck" in summary:
        lines += ["", f"Time ratios in the same run: symbolic / gradcheck = {summary['time_ratio_symbolic_vs_gradcheck']}, "
                      f"numeric / gradcheck = {summary['time_ratio_numeric_vs_gradcheck']}."]
    lines += ["", f"Mutants surviving every tier: {summary['survive_every_tier'] or 'none'}.",
              f"Mutants surviving float64 finite differences: {', '.join(summary['survive_fd64']) or 'none'}.", "",
              "| op | mutant | " + " | ".join(head[c] for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for c in cols:
            t = r["tiers"][c]
            cells.append("-" if t is None else (("**killed**" if r["mutant"] != "(correct)" else "**FALSE KILL**")
                                                if t["killed"] else "survived" if r["mutant"] != "(correct)" else "ok")
                         + (f" ({t['seconds']} s)" if t else ""))
        lines.append(f"| {r['op']} | {r['mutant']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def render_png(rows: list[dict], summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    cols = [t for t in COLUMNS if summary.get(t)]
    muts = [r for r in rows if r["mutant"] != "(correct)"]
    grid = np.array([[1.0 if r["tiers"][c]["killed"] else 0.0 for c in cols] for r in muts])
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * len(cols), 0.16 * len(muts) + 1.2), dpi=100)
    ax.imshow(grid, aspect="auto", cmap="RdYlGn", vmin=0, vmax=1)
    ax.set_xticks(range(len(cols)), cols, fontsize=8)
    ax.set_yticks(range(len(muts)), [f"{r['op']}~{r['mutant']}" for r in muts], fontsize=5)
    ax.set_title("kill matrix (green: killed, red: survived)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".tmp-" + path.name)
    fig.savefig(tmp, format="png")
    plt.close(fig)
    tmp.replace(path)


def run_mutate(args) -> int:
    from rich.console import Console
    console = Console(stderr=True)
    for optional in ("numeric.torch_bridge", "numeric.jax_bridge"):   # import once, before forking,
        try:                                                          # so no column pays for it
            __import__(optional)
        except ImportError:
            pass
    refs = _rows(args.targets)
    rows = []
    if args.jobs > 1:
        import multiprocessing
        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("fork")) as ex:
            futures = {ex.submit(run_row, r): r for r in refs}
            for f in as_completed(futures):
                rows.append(f.result())
                if not args.quiet:
                    console.print(_line(rows[-1]))
    else:
        for r in refs:
            rows.append(run_row(r))
            if not args.quiet:
                console.print(_line(rows[-1]))
    order = {(r.name, r.mutant or "(correct)"): i for i, r in enumerate(refs)}
    rows.sort(key=lambda r: order[(r["op"], r["mutant"])])
    from vjpcert.specs import builtin_ops
    ops = builtin_ops()
    fingerprint = {r["op"]: ops[r["op"]].spec_sha256 for r in rows if r["op"] in ops}
    out = Path(args.reports) / "mutation"
    if args.targets:
        rows, fingerprint = _kept_from(out / "kill_matrix.json", rows, fingerprint, list(ops))
    summary = summarise(rows)
    atomic_write(out / "kill_matrix.json", json.dumps({"summary": summary, "rows": rows,
                                                       "spec_sha256": fingerprint}, indent=1) + "\n")
    atomic_write(out / "kill_matrix.md", render_md(rows, summary))
    render_png(rows, summary, out / "kill_matrix.png")
    console.print(f"kill matrix: {out}/kill_matrix.md")
    false = [t for t in OURS if summary.get(t) and summary[t]["false_kills"]]
    return 1 if summary["survive_every_tier"] or false else 0


def _kept_from(path: Path, rows: list[dict], fingerprint: dict, order: list[str]) -> tuple[list[dict], dict]:
    """A run of some ops updates their rows of the matrix at ``path`` and keeps every other op's, with
    the spec hash it was made from (a kept row whose spec changed since stays stale, and says so); the
    rows in the registry's order, ops it does not know after them."""
    if not path.exists():
        return rows, fingerprint
    old = json.loads(path.read_text())
    ran = {r["op"] for r in rows}
    kept = [r for r in old.get("rows", []) if r["op"] not in ran]
    fingerprint = {**{k: v for k, v in old.get("spec_sha256", {}).items() if k not in ran}, **fingerprint}
    place = {name: i for i, name in enumerate(order)}
    merged = sorted(kept + rows, key=lambda r: place.get(r["op"], len(place)))     # stable: mutants keep their order
    return merged, fingerprint


def _line(row: dict) -> str:
    cells = " ".join(f"{t}:{'K' if v['killed'] else '-'}" for t, v in row["tiers"].items() if v)
    return f"{row['op']:>18} {row['mutant']:<40} {cells}"
