"""The dtype a framework graph is traced at, and how graphs traced at two dtypes are compared.

A framework function may take another path for another dtype (a fused ``autograd.Function`` or a
``custom_vjp`` under float16/bfloat16/float32, plain ops for float64) or on another device. A proof
of the float64 graph says nothing about the float32 one, so the dtype is part of what a frontend op
*is* (its identity, its assumptions), and by default the graph is traced at every dtype here and
must be the same at each, modulo casts: a cast between float dtypes is the identity in exact
arithmetic (the exact tiers read it so), and a float constant written at a lower precision is the
same constant when both round to the same number there (PyTorch writes ``eps`` rounded to the input's
dtype). Anything else that differs is a different function, and the op is refused, naming the dtype
to pass to prove the graph that dtype runs.

Float constants are read as the decimal they print as *at their dtype*: a float32 constant
9.999999974752427e-07 prints as 1e-06 in float32, and is read as 1/1000000, exactly as the float64
constant 0.1 is read as 1/10. Rounding here is exact (``fractions``): no double rounding through
float64.
"""
from __future__ import annotations

import hashlib
import math
from fractions import Fraction

from vjpcert.core.registry import SpecError

DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT = "float64"
# traced too when no dtype is asked for: a path taken only in lower precision must not hide behind
# the float64 graph
COMPARED = ("float32", "bfloat16", "float16")
# (significand bits, smallest normal exponent, largest finite value's exponent)
_FORMAT = {"float64": (53, -1022, 1023), "float32": (24, -126, 127), "bfloat16": (8, -126, 127),
           "float16": (11, -14, 15)}

FLIP_BUDGET_S = 120.0            # the trace with the device answered as on CUDA
CAST_WORDS = "casts read as exact: the proof is about the real function the graph computes, not its rounding"


def check_dtype(op_name: str | None, dtype) -> str | None:
    """None (the default: float64, compared with the lower precisions) or one of DTYPES."""
    if dtype is None:
        return None
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise SpecError(op_name, f"dtype={dtype!r} is not one of {', '.join(DTYPES)}")
    return dtype


def round_exact(x: Fraction, dtype: str) -> Fraction | float:
    """``x`` rounded to the nearest number of ``dtype`` (ties to even); +-inf past its largest."""
    p, emin, emax = _FORMAT[dtype]
    if x == 0:
        return Fraction(0)
    a = abs(x)
    e = a.numerator.bit_length() - a.denominator.bit_length()     # 2^(e-1) <= a < 2^(e+1)
    if a >= Fraction(2) ** e:
        e += 1                                                      # now 2^(e-1) <= a < 2^e
    q = max(e, emin + 1) - p                                        # the spacing of dtype's numbers near a
    scale = Fraction(2) ** q
    r = round(a / scale) * scale                                    # Fraction rounds half to even
    if r > (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax:
        return math.copysign(math.inf, x)
    return r if x > 0 else -r


def ulp(v: float, dtype: str | None = None) -> Fraction:
    """One unit in the last place of ``v`` at ``dtype`` (float64 by default), exactly: the spacing of the
    dtype's numbers at |v| (at the smallest normal below it)."""
    p, emin, _ = _FORMAT[dtype or DEFAULT]
    a = abs(Fraction(v))
    e = emin
    if a:
        e = max(a.numerator.bit_length() - a.denominator.bit_length(), emin)
        if a < Fraction(2) ** e:
            e -= 1                                                  # now 2^e <= a < 2^(e+1)
        e = max(e, emin)
    return Fraction(2) ** (e - p + 1)


def significant_digits(d: Fraction) -> int:
    """How many significant digits the exact decimal ``d`` is written with (0 for 0)."""
    if d == 0:
        return 0
    a = abs(d)
    while a.denominator != 1:
        a *= 10
    n = a.numerator
    while n % 10 == 0:
        n //= 10
    return len(str(n))


def round_to(v: float, dtype: str) -> float:
    """A float64 value rounded to ``dtype`` (the value itself for float64, inf and NaN)."""
    if dtype == "float64" or not math.isfinite(v):
        return float(v)
    return float(round_exact(Fraction(v), dtype))


def decimal_at(v: float, dtype: str | None) -> Fraction:
    """The exact decimal ``v`` prints as at ``dtype``: the shortest one that rounds to ``v`` there,
    when ``v`` is a number of that dtype; else the one it prints as in float64 (a Python float in a
    float32 graph that float32 cannot hold is what the code wrote)."""
    v = float(v)
    if dtype in (None, "float64") or not math.isfinite(v) or v == 0 or round_to(v, dtype) != v:
        return Fraction(repr(v))
    exact = Fraction(v)
    for digits in range(1, 18):
        text = f"{v:.{digits}g}"
        if round_exact(Fraction(text), dtype) == exact:
            return Fraction(text)
    return Fraction(repr(v))


COMMUTATIVE = {"aten.add.Tensor", "aten.mul.Tensor", "prims.add.default", "prims.mul.default",
               "add", "add_any", "mul"}


def term(key, terms: dict | None = None, name: str = "") -> str:
    """The name of one term of a graph: a digest of its operation and its arguments' terms, so two
    graphs compute the same values exactly when their outputs are the same terms. ``terms`` records
    each new one (digest -> operation, in graph order) to say where two graphs part."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
    if terms is not None:
        terms.setdefault(digest, name)
    return digest


def commuted(name: str, args: tuple, kwargs: tuple) -> tuple:
    """x + y and y + x are one term (autograd sums a gradient's parts in an order that follows the
    trace, not the math)."""
    if name in COMMUTATIVE and len(args) == 2 and not kwargs:
        return tuple(sorted(args, key=repr))
    return args


def first_difference(a, b, at: str, other: str) -> str:
    """Where two canonical graphs (``(outputs, terms)``) part, in a few words."""
    (_, ta), (_, tb) = a, b
    for mine, theirs, here, there in ((ta, tb, at, other), (tb, ta, other, at)):
        extra = [name for digest, name in mine.items() if digest not in theirs]
        if extra:
            return f"{extra[0]} at {here} computes a value no operation computes at {there}"
    return "it returns other values"


def dtype_refusal(who: str, dtype: str, base: str, why: str) -> str:
    """``why`` completes "traced at <dtype> it ...", e.g. "differs from the graph at float64 (...)"."""
    return (f"the function {who}: its graph depends on the dtype: traced at {dtype} it {why}; pass "
            f"dtype='{dtype}' (vjpcert prove --dtype {dtype}) to prove the graph you train with, or "
            f"dtype='{base}' for the {base} one alone")


def device_refusal(who: str, reads: list[str], why: str) -> str:
    return (f"the function {who}: its graph depends on the device: it reads {', '.join(reads[:3])}, and "
            f"traced with those reads answered as on CUDA it {why}; vjpcert traces on cpu only, so the CUDA "
            f"path cannot be proved here: make the function's math the same on every device")


def traced_words(framework: str, dtype: str, explicit: bool, compared) -> str:
    """One line of assumptions: the dtype the graph was traced at, and what was compared."""
    how = "fake tensors" if framework == "PyTorch" else "abstract arrays"
    head = f"traced at {dtype} on cpu ({framework} {how}): the graph is the one {dtype} inputs take"
    if explicit or not compared:
        return head + f"; other dtypes not compared (the proof is about the {dtype} graph only)"
    rounded = "float32 (what PyTorch computes them in)" if framework == "PyTorch" else "those dtypes"
    return (head + f"; traced at {', '.join(compared)} too, the graph is the same modulo casts and constants "
                   f"rounded to {rounded}, so no path taken only in lower precision is hidden")


def device_words(framework: str, reads: list[str]) -> str:
    """One line of assumptions: the device the graph was traced on, and what its code reads of it."""
    if framework == "PyTorch":
        own = ("PyTorch's own choice of kernels by device (made in C++, such as fused attention) is not seen")
        asked = "x.device, x.is_cuda, torch.cuda.is_available()"
    else:
        own = "JAX's own choice of lowering by backend is not seen"
        asked = "jax.default_backend(), jax.devices()"
    if reads:
        return (f"traced on cpu: the function reads the device ({', '.join(reads[:4])}); traced again with "
                f"those reads answered as on CUDA, its graph is the same; {own}")
    return f"traced on cpu: the function's own code reads no device ({asked}); {own}"


def identity_of(dtype: str | None) -> str:
    """What the op's identity records of its dtype."""
    return f"{dtype or DEFAULT}{'' if dtype else ' compared with ' + ','.join(COMPARED)} on cpu"


def who(fn, op_name: str | None) -> str:
    """The user's function, named for a refusal."""
    mod = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    full = f"{mod}.{name}" if mod and mod != "__main__" else name
    return full if not op_name or op_name in full else f"{full} (op {op_name})"


def checked_paths(one, canonical, *, dtype: str | None, op_name: str, name: str, fork: bool,
                  compare: bool = True):
    """The graph to prove, traced at ``dtype`` (float64 when None) by ``one(dtype, as_cuda) -> (graph,
    device reads, reads that cannot be answered as on CUDA)``; refused (``SpecError``) when, with no
    dtype given, the graph at a lower precision is not the same modulo casts (``canonical(graph, at)
    -> (outputs, terms)``), or when the code reads the device and the graph traced with those reads
    answered as on CUDA is not the same. The graph records what was compared (``explicit``,
    ``compared``, ``device_reads``) for the assumptions. With ``compare`` False, the graph at ``dtype``
    alone, compared with nothing: its shape and code (an op's identity), never a graph to prove."""
    at = dtype or DEFAULT
    if not compare:
        return one(at, False)[0]

    def same_on_cuda(g, reads, fixed, d):
        if fixed:
            raise SpecError(op_name, device_refusal(name, reads, f"cannot be traced ({fixed[0]} cannot be "
                                                                 f"answered as on CUDA)"))
        if not reads:
            return

        def flipped():
            return canonical(one(d, True)[0], d)
        if fork:
            from vjpcert.core.budget import run_with_budget
            out = run_with_budget(flipped, FLIP_BUDGET_S, memory_mb=None)
            status, value, error = out.status, out.value, out.error
        else:
            try:
                status, value, error = "ok", flipped(), ""
            except Exception as exc:
                status, value, error = "error", None, str(getattr(exc, "problem", exc))
        if status != "ok":
            problem = (error or status).strip().splitlines()[0][:300]
            raise SpecError(op_name, device_refusal(name, reads, f"cannot be traced ({problem})"))
        mine = canonical(g, d)
        if value[0] != mine[0]:
            diff = first_difference(mine, value, "cpu", "CUDA")
            raise SpecError(op_name, device_refusal(name, reads, f"differs from the graph on cpu ({diff})"))

    g, reads, fixed = one(at, False)
    same_on_cuda(g, reads, fixed, at)
    device_reads, compared = list(reads), []
    if dtype is None:
        for low in COMPARED:
            try:
                other, more, fixed = one(low, False)
            except SpecError as exc:
                raise SpecError(op_name, dtype_refusal(name, low, at, f"cannot be traced ({exc.problem}), "
                                                                      f"unlike at {at}")) from None
            a, b = canonical(g, low), canonical(other, low)
            if a[0] != b[0]:
                raise SpecError(op_name, dtype_refusal(name, low, at, f"differs from the graph at {at} "
                                                                      f"({first_difference(a, b, at, low)})"))
            same_on_cuda(other, more, fixed, low)
            device_reads += more
            compared.append(low)
    g.explicit, g.compared = dtype is not None, tuple(compared)
    g.device_reads = tuple(dict.fromkeys(device_reads))
    return g
