"""A failed certificate's witness, told in a few lines a person can act on: where it fails (which
input, case, component or entry), the two values that disagree (backward vs J^T dy, kernel vs spec,
implementation vs spec, ...), how far apart they are, and the dims.

Every tier writes its own witness fields (``symbolic/fixed/strategies.py``, ``numeric/check.py``,
``cuda_kernels/check.py``, ``vjpcert/impl.py``); this module only reads them, so the terminal, the
Markdown and the HTML tell the same story. Fields it does not know are left to the certificate: the
last line always names the certificate file, which holds the whole witness (points, dy, seed)."""
from __future__ import annotations

import re
from pathlib import Path

_NUMPY_REPR = re.compile(r"np\.(?:int|uint|float)\d*\(([^()]*)\)")

# where the claim fails, in the order a reader narrows it down
WHERE = ("in", "check", "case", "cotangent", "output", "law", "component", "worst", "index", "mode", "direction")
# the two sides that disagree: (what the code under test gave, what it should have given)
SIDES = (("backward", "J^T dy"), ("lhs", "rhs"), ("claimed", "derived"), ("from_backward", "from_forward"),
         ("<J^T v, u>", "<v, J u>"), ("implementation", "spec (50 digits)"), ("kernel", "spec_f64"),
         ("grid_order", "kernel"), ("run1", "run2"), ("kernel_shape", "spec_shape"))
# how far apart
SIZE = ("relative", "error", "bound", "model_bound", "residual", "digits", "elements_over", "of")
# raw data: in the certificate, never on the terminal
BULKY = {"point", "dy", "u", "inputs", "seed", "point_truncated", "point_entries", "residual_50_digits",
         "dims", "exact", "vjp_max", "conditioning_loss", "zero_gradient", "model", "spec_f32"}
LONG = 120           # a value longer than this is cut (the certificate holds it whole)


def plain(value):
    """A JSON value as a person writes it: numpy scalars as plain numbers, lists as lists."""
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        value = value.item()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def short(value, limit: int = LONG) -> str:
    """One value on one line: a float to 6 significant digits, a long vector elided (its length shown)."""
    value = plain(value)
    if isinstance(value, float):
        text = f"{value:.6g}"
    elif isinstance(value, list) and len(value) > 8:
        head = ", ".join(short(v, 20) for v in value[:3])
        text = f"[{head}, ... {len(value)} entries]"
    elif isinstance(value, list):
        text = "[" + ", ".join(short(v, 20) for v in value) + "]"
    else:
        text = str(value)
    text = _NUMPY_REPR.sub(r"\1", " ".join(text.split()))     # `np.int64(1)` (a tier's repr) reads `1`
    return text if len(text) <= limit else text[:limit - 3] + "..."


POINT_KEYS = ("point", "inputs")    # where a tier writes the input values it failed at
POINT_ROWS = 4                      # inputs shown on the terminal; the certificate holds them all


_ENTRY = re.compile(r"^([^\[\]]+)(\[[^\]]*\])$")


def _index_order(item):
    return [int(i) if i.strip().lstrip("-").isdigit() else i for i in item[0].strip("[]").split(",")]


def point_rows(w: dict) -> list[tuple[str, str]]:
    """The input point the claim failed at, one row per input (values elided past a few), so a
    reader can rerun it (``vjpcert check --point``) without opening the certificate."""
    point = next((w[k] for k in POINT_KEYS if isinstance(w.get(k), dict) and w[k]), None)
    if point is None:
        return []
    grouped: dict[str, object] = {}
    for key, value in point.items():       # the exact tier names each entry: x[0], x[1], ...
        entry = _ENTRY.match(str(key))
        if entry:
            grouped.setdefault(entry[1], {})[entry[2]] = value
        else:
            grouped[str(key)] = value
    for name, value in grouped.items():
        if isinstance(value, dict):
            grouped[name] = ", ".join(f"{i}={short(v, 30)}" for i, v in sorted(value.items(), key=_index_order))
    names = list(grouped)
    rows = [(f"at {name}", short(grouped[name], 90)) for name in names[:POINT_ROWS]]
    if len(names) > POINT_ROWS:
        rows.append(("at ...", f"{len(names) - POINT_ROWS} more input(s) in the certificate"))
    return rows


def witness_rows(witness: dict) -> list[tuple[str, str]]:
    """(label, value) rows: where, the two sides, the size of the disagreement, the input point;
    then anything else small that a tier wrote (an error message, a violation count)."""
    w = plain(witness)
    rows, used = [], set()
    where = [f"{k} {short(w[k], 60)}" for k in WHERE if k in w]
    used.update(k for k in WHERE if k in w)
    if where:
        rows.append(("where", ", ".join(where)))
    for got, want in SIDES:
        if got in w or want in w:
            rows.append((f"{got} vs {want}", f"{short(w.get(got, '?'), 50)} vs {short(w.get(want, '?'), 50)}"))
            used.update((got, want))
    size = [f"{k} {short(w[k], 30)}" for k in SIZE if k in w]
    used.update(k for k in SIZE if k in w)
    if size:
        rows.append(("size", ", ".join(size)))
    rows += point_rows(w)
    for k, v in w.items():
        if k in used or k in BULKY:
            continue
        if k == "violations" and isinstance(v, list):
            rows.append((k, f"{len(v)}: {short(v[0]) if v else ''}"))
        else:
            rows.append((k, short(v)))
    return rows


def witness_lines(cert, root: Path | str | None = None, *, indent: str = "    ") -> list[str]:
    """The lines the terminal prints under a failed claim: the witness rows, the dims, and the
    certificate's path (under ``root``, the report directory)."""
    rows = witness_rows(cert.evidence.get("witness") or {})
    dims = ", ".join(f"{k}={v}" for k, v in sorted(cert.dims.items())) or "-"
    rows.append(("dims", dims))
    path = Path(root) / cert.relpath() if root is not None else cert.relpath()
    rows.append(("certificate", str(path)))
    width = max(len(label) for label, _ in rows)
    return [f"{indent}{label:<{width}}  {value}" for label, value in rows]


def elide_vector(values: list, keep: int | None = None, edge: int = 3) -> list:
    """A long list cut to its first and last few entries and the entry at ``keep`` (the offending
    one), with "..." marking each gap: a witness at n = 1025 stays readable."""
    n = len(values)
    if n <= 2 * edge + 3:
        return list(values)
    show = set(range(edge)) | set(range(n - edge, n)) | ({keep} if keep is not None and 0 <= keep < n else set())
    out, last = [], -1
    for i in sorted(show):
        if i != last + 1:
            out.append("...")
        out.append(values[i])
        last = i
    return out
