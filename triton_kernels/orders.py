"""How the Triton tier compares a kernel's runs with each other: whether its bits vary by themselves
(``nondeterminism``, ``varies``), and whether they depend on the order a launch's programs run in
(``program_orders``): a race between programs, unless float atomics or the kernel's own variation
make every order's rounding legitimately its own, when each order is held to the tolerance rule.
``run`` is the checker's one run of the kernel on the case's inputs (``check._run`` bound to them).
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from vjpcert.core import kernel_checks as _shared
from vjpcert.core import tolerance as _rule
from vjpcert.triton_kernels.interpreter import ORDERS, program_sequence

# Runs in grid order with NaN fences before other bits under other fences are called a read outside
# the tensors, or other bits in another program order a race: a kernel whose bits vary (a sum in a
# random block order) can agree with itself by chance. Measured: a softmax summing 4 rows of 4 blocks
# each in a fresh random order agrees with an earlier call 28-41% of the time, so 8 reruns all
# agreeing happens about once in 1000 checks of it; a kernel whose bits vary more rarely than that is
# taken for a deterministic one (and a race, if another order changes its bits)
RERUNS_BEFORE_A_FENCE_READ = 8

_value = _shared.finite_or_text


class KernelRaised(Exception):
    pass


class OrderUnknown(Exception):
    pass


def varies(spec, run, runs) -> dict:
    """Run the kernel again, as the first run ran (grid order, NaN fences), up to RERUNS_BEFORE_A_FENCE_READ
    times (each run appended to ``runs``): where its bits differ from the first run's, the kernel's
    bits vary by themselves (a sum in a random block order), and a difference seen under other fences
    or another program order is not evidence of a read outside the tensors or of a race."""
    for _ in range(RERUNS_BEFORE_A_FENCE_READ):
        runs.append(run()[0])
        found = nondeterminism(spec, [runs[0], runs[-1]])
        if found:
            return found
    return {}


def nondeterminism(spec, runs) -> dict:
    """{} when every run gave the first run's bits (a NaN is a NaN whatever its payload), else where
    they first differ and by how much at most."""
    for name, a, b in zip(spec.outputs, runs[0], runs[1]):
        if a.shape != b.shape or a.dtype != b.dtype:
            return {"output": name, "differing": "shape or dtype"}
        if not a.size:
            continue
        diff = _shared.bits_differ(a, b)
        if a.dtype.kind == "f":
            diff &= ~(np.isnan(a) & np.isnan(b))
        if diff.any():
            with np.errstate(all="ignore"):
                gap = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            idx = [int(i) for i in np.argwhere(diff)[0]] if diff.ndim else []
            return {"output": name, "index": idx, "differing": int(diff.sum()), "of": int(diff.size),
                    "largest_difference": _value(gap)}
    return {}


def order_seed(seed: int, spec, dims: dict, case: str) -> int:
    """The seed of the shuffled orders: a hash of the kernel (name, source, op, kind), the dims, the
    case and the checker's seed, so a rerun shuffles the same way and two kernels differently."""
    key = json.dumps([seed, spec.name, spec.source, spec.op_name, spec.kind, sorted(dims.items()), case])
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big")


def program_orders(spec, run, dims, case, evidence, failed, grid_outs, grid_launches, ref64, ref32, seed, *,
                   dtype, floor_scale: float, relaxed: bool = False):
    """Run the case again (``run(order=, order_seed=, record=)``) with each launch's programs in every
    other order of ``ORDERS``; None if the outputs do not depend on the order (bitwise; within the
    tolerance rule where float atomic adds ran, or where the kernel's bits vary from run to run
    anyway: ``relaxed``), else the failed certificate."""
    s = order_seed(seed, spec, dims, case)
    launches = [{k: launch[k] for k in ("kernel", "grid")} for launch in grid_launches.launches]
    record = {"case": case, "seed": s, "ran": ["grid"], "launches": launches,
              "float_atomics": grid_launches.float_atomics, "compared": "bitwise", "largest_difference": 0.0}
    evidence["program_orders"] = record
    if not any(n > 1 for n in grid_launches.grids()):
        record["note"] = ("every launch has one program: every order is grid order" if launches
                          else "the launcher made no Triton launch")
        return None
    seen = {sequences("grid", s, grid_launches)}
    atomics = grid_launches.float_atomics > 0 or relaxed
    worst: dict = {}
    for order in ORDERS[1:]:
        key = sequences(order, s, grid_launches)
        if key in seen:
            continue        # a launch of two programs has two orders: a shuffle repeats one of them
        seen.add(key)
        where = {"order": order, "order_seed": s, "launches": launches}
        try:
            outs, fence, ran = run(order=order, order_seed=s, record=True)
        except KernelRaised as exc:
            return failed("kernel raised", **where, error=str(exc))
        record["ran"].append(order)
        if fence:
            return failed("fence", **where, violations=fence)
        atomics = atomics or ran.float_atomics > 0
        record["float_atomics"] = max(record["float_atomics"], ran.float_atomics)
        for name, a, b, r64, r32 in zip(spec.outputs, grid_outs, outs, ref64, ref32):
            if a.shape != b.shape or a.dtype != b.dtype:
                return failed("program order", **where, output=name, grid_shape=list(a.shape),
                              reordered_shape=list(b.shape), reordered_dtype=str(b.dtype))
            # bit for bit (a sign of zero counts), but a NaN is a NaN whatever its payload
            diff = _shared.bits_differ(a, b) & ~(np.isnan(a) & np.isnan(b))
            if not diff.any():
                continue
            if not atomics:
                # another order, other bits: a race, unless grid order's own bits vary too (its first
                # runs agreed by chance); then every order is held to the rule, as for float atomics
                reruns = [grid_outs]
                varied = varies(spec, run, reruns)
                if varied:
                    atomics = True
                    record["varies_in_grid_order"] = varied
            idx = [int(i) for i in np.argwhere(diff)[0]] if diff.ndim else []
            sides = {"output": name, "index": idx, "kernel": _value(b[tuple(idx)]), "spec_f64": _value(r64[tuple(idx)]),
                     "grid_order": _value(a[tuple(idx)]), "differing": int(diff.sum()), "of": int(diff.size)}
            if not atomics:
                return failed("program order", **where, **sides,
                              explanation="the outputs depend on the order a launch's programs run in: a program "
                                          "reads what another program of the same launch writes, with nothing "
                                          "making it wait (a GPU runs them in any order, and at once)")
            # float atomic adds: the order changes their rounding, so this order is held to the rule too
            with np.errstate(all="ignore"):
                gap = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            if np.isfinite(gap):        # a non-finite output is outside the rule just below
                record["largest_difference"] = max(record["largest_difference"], gap)
            r = _rule.compare(b, r64, r32, backward=spec.kind == "backward", dtype=dtype, floor_scale=floor_scale)
            if not r["ok"] or worst.get(name, {}).get("error", -1.0) < r["error"]:
                worst[name] = {"order": order, "error": r["error"], "bound": r["bound"]}
            if not r["ok"]:
                i = [int(j) for j in np.unravel_index(r["worst_index"], r64.shape)] if r64.ndim else []
                return failed("program order", **where, float_atomics=record["float_atomics"], output=name,
                              index=i, kernel=_value(b[tuple(i)]), spec_f64=_value(r64[tuple(i)]),
                              grid_order=_value(a[tuple(i)]), error=r["error"], bound=r["bound"],
                              explanation="float atomic adds round differently in each order, so every order is "
                                          "held to the tolerance rule: this one is outside it")
    if atomics:
        record["compared"] = ("tolerance rule in every order (the kernel's bits vary from run to run)"
                              if (relaxed or record.get("varies_in_grid_order")) and not record["float_atomics"] else
                              "tolerance rule in every order (float atomic adds: their rounding depends on the order)")
        record["worst"] = worst
    return None


def sequences(order: str, s: int, launches) -> tuple:
    return tuple(tuple(program_sequence(order, s, i, n).tolist()) for i, n in enumerate(launches.grids()))
