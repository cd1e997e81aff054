"""The op registry: how a spec file declares an op, its backward, its laws and its mutants.

An op is a forward function over a backend ``B`` plus declarations: which inputs are differentiable,
their shapes (in named dims), scalar parameters (with the assumption a proof may use, e.g. eps > 0),
non-differentiable inputs (RoPE positions) and the dims at which the checkers work by default.
Functions are bound *by argument name*, so a backward or a law names only what it reads.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

# the audit hook that sees the data files spec code reads: installed before any spec is imported
from vjpcert.core import sources as _sources  # noqa: F401
from vjpcert.core.errors import SpecError, refuse, take_refusals  # noqa: F401  (re-exported)
from vjpcert.core.spec_array import SpecArray, plain, spec_code, wrap
from vjpcert.core.features import spec_features


@dataclass(frozen=True)
class Param:
    """A scalar parameter. ``symbolic`` ones are symbols in proofs (so a proof holds for every value
    allowed by ``positive``); numeric checks and kernels use ``default``. Non-symbolic ones (ints,
    bools such as a causal flag) are structural and passed through unchanged everywhere."""

    default: Fraction | int | bool
    positive: bool = False
    symbolic: bool = True
    doc: str = ""


# A law (or a mutant) may ask for these by name, besides the op's inputs and params: ``forward`` and
# ``backward`` are the op's own functions with B and the current params bound, so a law about the
# backward is checked against whichever backward is under test (a mutant's, too).
# ``nodes`` gives a composite op its sub-ops (declared with ``op(nodes=...)``): ``nodes.attn(Q, K, V)``
# runs a node's forward and ``nodes.attn.vjp(Q, K, V, dy)`` its backward. Because a composite reaches
# its nodes only through this namespace, the prover can swap every node for an opaque map and check
# the wiring alone (``symbolic.composition``).
LAW_EXTRAS = ("dy", "forward", "backward", "nodes")
# Claim names the checkers add: the numeric tier's float references (every op), and that nothing an
# op computes depends on B.max_shift (ops whose own code calls it; see core.trace.TraceBackend).
SHIFT_CLAIM = "max_shift_free"
# ... and, for ops whose forward or backward meets a kink (B.step, B.relu), that the backward's value on
# the kink itself follows the derivative table's convention (a prover proves the VJP region by region)
KINK_CLAIM = "at_the_kink"
RESERVED_CLAIMS = ("reference", SHIFT_CLAIM, KINK_CLAIM)


@dataclass(frozen=True)
class Law:
    name: str
    fn: Callable
    doc: str
    params: Mapping[str, object]      # overrides, e.g. {"eps": 0} for laws that hold only at eps = 0
    needs_dy: bool


@dataclass(frozen=True)
class Mutant:
    """A deliberately wrong forward or backward, and the claims it must make fail."""

    name: str
    fn: Callable
    replaces: str                     # "vjp" or "forward"
    kills: tuple[str, ...]
    doc: str
    evades: tuple[str, ...] = ()      # input cases (e.g. "random") on which the mutant is right
    refused: bool = False             # a construct no checker may follow: refused as bad input
    exact_only: bool = False          # an error below any finite precision: only exact tiers must kill it


# Op and claim names become file names (reports/certificates/<op>/...): a name is refused unless it
# is plainly one path component -- no separators, no "..", nothing a shell or a filesystem reads.
_OP_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_CLAIM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-\[\]]*$")


def check_name(kind: str, name: str, pattern=None) -> str:
    pattern = pattern or (_OP_NAME if kind == "op" else _CLAIM_NAME)
    if not isinstance(name, str) or not pattern.match(name) or ".." in name:
        raise SpecError(None, f"{kind} name {name!r} is not allowed: use letters, digits and _ . - "
                              f"(it becomes a file name in the reports)")
    return name


Dims = Mapping[str, int]
_DIM_TERM = re.compile(r"^\s*([A-Za-z_]\w*|\d+)\s*$")


def dim_size(entry, dims: Dims, op: str) -> int:
    """Size of one shape entry: an int, a dim name, a product such as ``"h*dh"``, or a function of
    the dims (a tape's length)."""
    if isinstance(entry, int):
        return entry
    if callable(entry):
        return int(entry(dims))
    size = 1
    for term in str(entry).split("*"):
        m = _DIM_TERM.match(term)
        if not m:
            raise SpecError(op, f"shape entry {entry!r} is not a dim name, an int or a product of them")
        tok = m.group(1)
        if tok.isdigit():
            size *= int(tok)
        elif tok in dims:
            size *= int(dims[tok])
        else:
            raise SpecError(op, f"dims {dict(dims)} do not give a size for {tok!r}")
    return size


def dim_names(shape) -> set[str]:
    """The dims a shape is given by; a function of the dims names those it reads in ``reads``."""
    names = set()
    for entry in shape:
        if callable(entry):
            names |= set(getattr(entry, "reads", ()))
        elif not isinstance(entry, int):
            names |= {t.strip() for t in str(entry).split("*") if not t.strip().isdigit()}
    return names


class Op:
    """One registered op. Calling it runs the forward: ``softmax(B, x)``."""

    def __init__(self, fn: Callable, *, name: str, inputs: Mapping[str, tuple], output: tuple,
                 nondiff: Mapping[str, tuple] | None, params: Mapping[str, Param] | None,
                 dims: list[Dims], large_dims: list[Dims] | None, check_dims: Dims | None,
                 assumptions: tuple[str, ...], constraints: Callable[[Dims], str | None] | None,
                 tags: tuple[str, ...] = (), kinks: Callable | None = None,
                 sample: Mapping[str, Callable] | None = None):
        self.name = name
        self.forward = fn
        self.inputs = dict(inputs)
        self.output = tuple(output)
        self.nondiff = dict(nondiff or {})
        self.params = dict(params or {})
        self.dims = [dict(d) for d in dims]
        self.large_dims = [dict(d) for d in (large_dims or [])]
        self.check_dims = dict(check_dims) if check_dims else dict(self.dims[-1])
        self.assumptions = tuple(assumptions)
        self.constraints = constraints
        self.tags = tuple(tags)
        self.kinks = kinks              # kinks(B, **inputs) -> distance of each entry to a kink
        self.sample = dict(sample or {})  # name -> sampler(rng, shape): inputs that need a law of their own
        self.nodes: dict[str, "Op"] = {}
        self.proofs: tuple[str, ...] = ("monolithic",)
        self.vjp: Callable | None = None
        self.laws: list[Law] = []
        self.mutants: list[Mutant] = []
        self.general: dict[str, None] = {}       # claims proved for every size (``every_size``)
        self.module = inspect.getmodule(fn)
        self.doc = inspect.getdoc(fn) or (inspect.getdoc(self.module) if self.module else "") or ""
        self.base_name = self.name      # a mutant twin keeps the name of the op it mutates
        self._check_signature(fn, "forward", extra=("nodes",))

    # ---------------------------------------------------------------- declarations
    @property
    def arg_names(self) -> list[str]:
        return [*self.inputs, *self.nondiff, *self.params]

    def _check_signature(self, fn, role, extra):
        sig = inspect.signature(fn).parameters
        params = list(sig)
        # the backend comes first: named B, or positional-only under any name (so an array may be B)
        if not params or (params[0] != "B" and sig[params[0]].kind is not inspect.Parameter.POSITIONAL_ONLY):
            raise SpecError(self.name, f"the {role} must take the backend B as its first argument")
        unknown = set(params[1:]) - set(self.arg_names) - set(extra)
        if unknown:
            raise SpecError(self.name, f"the {role} {fn.__name__}() takes {sorted(unknown)}, "
                                       f"which are not declared inputs/params {self.arg_names}")
        return params[1:]

    def defvjp(self, fn):
        """Register the hand-written backward: returns one cotangent per differentiable input."""
        self._check_signature(fn, "backward", extra=("dy", "nodes"))
        if "dy" not in inspect.signature(fn).parameters:
            raise SpecError(self.name, "the backward must take the output cotangent 'dy'")
        self.vjp = fn
        return fn

    def law(self, fn=None, *, params: Mapping[str, object] | None = None, name: str | None = None):
        """Register a law: a function whose result must be identically 0 (an array, or a pair
        ``(lhs, rhs)`` that must be equal, which also tells the witness search the scale)."""
        def register(f):
            self._check_signature(f, "law", extra=LAW_EXTRAS)
            law_name = check_name("law", name or f.__name__)
            if law_name in {l.name for l in self.laws} or law_name.startswith("vjp[") \
                    or law_name in RESERVED_CLAIMS:
                raise SpecError(self.name, f"law name {law_name!r} is used twice (or is reserved: "
                                           f"{', '.join(RESERVED_CLAIMS)})")
            self.laws.append(Law(law_name, f, inspect.getdoc(f) or "", dict(params or {}),
                                 "dy" in inspect.signature(f).parameters))
            return f
        return register(fn) if fn is not None else register

    def every_size(self, *claims: str):
        """Ask for proofs of ``claims`` for every size (verdict ``proved-general``). The statement is
        derived from the spec's own code by a shape-polymorphic trace (``symbolic.every_size.shape_trace``):
        nothing is written twice."""
        declared = {f"vjp[{x}]" for x in self.inputs} | {l.name for l in self.laws}
        for claim in claims:     # only the traced claims (max_shift_free, at_the_kink) need the trace
            if claim not in declared and claim not in self.claims():
                raise SpecError(self.name, f"every_size: unknown claim {claim!r}; it has {self.claims()}")
            self.general[claim] = None
        return self

    def mutant(self, name: str, *, kills=(), replaces: str = "vjp", doc: str | None = None, evades=(),
               refused: bool = False, exact_only: bool = False):
        """Register a deliberately wrong backward (or forward) and the claims it must make fail; or,
        with ``refused``, one written with a construct the checkers must refuse as bad input (a
        comparison of traced values, a write into an input, a read of the backend's identity)."""
        if replaces not in ("vjp", "forward"):
            raise SpecError(self.name, f"mutant {name!r}: replaces must be 'vjp' or 'forward'")
        if refused == bool(kills):
            raise SpecError(self.name, f"mutant {name!r}: name the claims it kills, or mark it refused")

        def register(f):
            self._check_signature(f, f"mutant {name}", extra=LAW_EXTRAS)
            self.mutants.append(Mutant(name, f, replaces, tuple(kills), doc or inspect.getdoc(f) or name,
                                       tuple(evades), refused, exact_only))
            return f
        return register

    # ---------------------------------------------------------------- claims
    def claims(self) -> list[str]:
        """Names of everything this op claims: one VJP claim per differentiable input, then laws,
        then ``max_shift_free`` where the op's own code calls ``B.max_shift``."""
        if getattr(self, "_fixed_claims", None) is not None:     # a mutant is judged by its op's claims
            return list(self._fixed_claims)
        out = [f"vjp[{x}]" for x in self.inputs] + [l.name for l in self.laws]
        return out + ([SHIFT_CLAIM] if self.uses_max_shift() else []) + ([KINK_CLAIM] if self.uses_kinks() else [])

    def _features(self) -> tuple[bool, bool]:
        """(max_shift, kinks), traced once per (forward, backward) pair and remembered across processes
        (``core.features``); a spec that does not trace says (False, False) here and is refused where
        it is validated."""
        key = (self.forward, self.vjp)
        if getattr(self, "_features_key", None) != key:
            from vjpcert.core.tracing import spec_features as traced
            try:
                self._features_seen = spec_features(self, traced) if self.vjp is not None else (False, False)
            except SpecError:
                self._features_seen = (False, False)
            self._features_key = key
        return self._features_seen

    def uses_max_shift(self) -> bool:
        return self._features()[0]

    def uses_kinks(self) -> bool:
        return self._features()[1]

    def get_law(self, name: str) -> Law:
        for l in self.laws:
            if l.name == name:
                return l
        if name == SHIFT_CLAIM:         # well defined for every op (trivially true without max_shift)
            return Law(SHIFT_CLAIM, None, "The forward and the backward do not depend on B.max_shift: "
                       "the proofs, made with shift 0, hold for the row maximum floats subtract.", {}, True)
        if name == KINK_CLAIM:
            return Law(KINK_CLAIM, None, "On the kink itself, where the VJP proved on each open region says "
                       "nothing, the backward gives what the derivative table's convention gives: "
                       "relu'(0) = step(0) = 0.", {}, True)
        raise SpecError(self.name, f"has no claim {name!r}; it has {self.claims()}")

    def with_nodes(self, nodes: Mapping[str, object], suffix: str) -> "Op":
        """A copy whose node namespace maps to other implementations (opaque maps, recorders)."""
        twin = object.__new__(type(self))      # a subclass (a framework op) stays one
        twin.__dict__.update(self.__dict__)
        twin.name = f"{self.name}~{suffix}"
        twin.nodes = dict(nodes)
        twin.mutants = []
        return twin

    def with_mutant(self, mutant: Mutant) -> "Op":
        """A copy of this op whose backward (or forward) is the mutant; it is not registered."""
        twin = object.__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin._fixed_claims = tuple(self.claims())
        twin._extra_functions = (*getattr(self, "_extra_functions", ()), mutant.fn)
        twin.name = f"{self.name}~{mutant.name}"
        twin.base_name = self.name
        if mutant.replaces == "vjp":
            twin.vjp = mutant.fn
        else:
            twin.forward = mutant.fn
        twin.laws = list(self.laws)
        twin.mutants = []
        return twin

    # ---------------------------------------------------------------- shapes and calls
    def shape(self, decl: tuple, dims: Dims) -> tuple[int, ...]:
        return tuple(dim_size(e, dims, self.name) for e in decl)

    def dim_names(self) -> set[str]:
        names = dim_names(self.output)
        for shape in [*self.inputs.values(), *self.nondiff.values()]:
            names |= dim_names(shape)
        return names

    def resolve_dims(self, dims: Dims) -> dict[str, int]:
        """Check dims are complete, positive and allowed by the op's constraints."""
        missing = self.dim_names() - set(dims)
        if missing:
            raise SpecError(self.name, f"dims {dict(dims)} lack {sorted(missing)}")
        out = {k: int(v) for k, v in dims.items() if k in self.dim_names()}
        bad = [k for k, v in out.items() if v < 1]
        if bad:
            raise SpecError(self.name, f"dims must be >= 1, got {dict(out)}")
        if self.constraints:
            problem = self.constraints(out)
            if problem:
                raise SpecError(self.name, f"dims {out} rejected: {problem}")
        return out

    def bind(self, fn: Callable, B, values: Mapping[str, object]):
        """Call a spec function with the values its parameters name (see LAW_EXTRAS). Spec code sees
        the backend only through its documented functions (``spec_backend``) and every array
        read-only: a spec that writes into its inputs would move the leaves a proof differentiates
        by, so that is refused (numpy raises), never silently traced."""
        from vjpcert.core.backends import spec_backend
        B = spec_backend(B)
        try:
            names = _parameter_names(fn)
        except TypeError:             # an unhashable callable: no cache
            names = tuple(inspect.signature(fn).parameters)[1:]
        extras = {"forward": lambda: self.bound(self.forward, B, values),
                  "backward": lambda: self.bound(self.vjp, B, values),
                  "nodes": lambda: NodeSet(self.nodes, B)}
        args = {n: extras[n]() if n in extras else read_only(values[n]) for n in names}
        with spec_code():
            return plain(fn(B, **args))

    def bound(self, fn: Callable, B, values: Mapping[str, object]) -> Callable:
        """``fn`` with B bound, taking the op's arrays positionally (inputs, non-differentiable inputs,
        then dy) and anything by name; what is not given keeps its value in ``values``."""
        order = [*self.inputs, *self.nondiff, "dy"]

        def call(*args, **kwargs):
            vals = dict(values)
            vals.update(zip(order, args))
            vals.update(kwargs)
            return wrap(self.bind(fn, B, vals))          # back into spec code
        return call

    def param_values(self, overrides: Mapping[str, object] | None = None) -> dict:
        vals = {k: p.default for k, p in self.params.items()}
        vals.update(overrides or {})
        return vals

    # ---------------------------------------------------------------- rounded constants
    def rounded_constants(self, dims: Dims) -> list[str]:
        """The float constants (by repr) this op reads at ``dims`` as decimals that are only the rounding
        of a real: none for a spec, whose constants are exact (``B.c``, ``B.pi``, ``B.sqrt(2)``); a
        framework graph's where no named real matches (``frontends.values``)."""
        return []

    def constants_shifted(self, shifts: Mapping[str, int]):
        """A context in which each rounded constant is read moved by ``shifts[repr]`` units in its last
        place: how a claim's residual moves with the rounding of its constants."""
        import contextlib
        if shifts:
            raise SpecError(self.name, f"has no rounded constants to shift ({sorted(shifts)})")
        return contextlib.nullcontext()

    # ---------------------------------------------------------------- identity
    @property
    def source_files(self) -> list[Path]:
        """Every file of this op's code from outside vjpcert's machinery (``core.sources``): the spec
        module, what it imports (transitively), the spec files of its nodes, a mutant's file."""
        from vjpcert.core.sources import code_files
        functions = [self.forward, self.vjp, *(law.fn for law in self.laws if law.fn is not None),
                     *getattr(self, "_extra_functions", ())]
        files = set(code_files(modules=[self.module], functions=[f for f in functions if f is not None]))
        for node in self.nodes.values():
            node_op = getattr(node, "op", node)
            if isinstance(node_op, Op):
                files.update(node_op.source_files)
        return sorted(files)

    @property
    def identity_sha256(self) -> str:
        """The hash of those files as this process loaded them (a worker with old code says so): the
        op's code, without what it read. A subclass with an identity of its own (a framework op: its
        code, the framework's version, the traced graph) is that identity."""
        if type(self).spec_sha256 is not Op.spec_sha256:
            return self.spec_sha256
        from vjpcert.core.sources import files_sha256
        return files_sha256(self.source_files)

    @property
    def spec_sha256(self) -> str:
        """The op as this process holds it: its code, and every version of every data file that code
        read here (``core.sources``) -- what an in-process cache of results keys on. Equal to
        ``identity_sha256`` for code that read nothing. A certificate records ``core.sources.covered``."""
        from vjpcert.core.sources import files_sha256, loaded_sha256
        files = self.source_files
        return loaded_sha256(self, files_sha256(files), files)

    def __call__(self, B, *args, **kwargs):
        from vjpcert.core.backends import spec_backend
        return plain(self.forward(spec_backend(B), *map(read_only, args),
                                  **{k: read_only(v) for k, v in kwargs.items()}))

    def __repr__(self):
        return f"<op {self.name}: inputs {list(self.inputs)} -> {self.output}>"


@functools.lru_cache(maxsize=None)
def _parameter_names(fn) -> tuple[str, ...]:
    """A spec function's parameters after B (``inspect.signature`` is slow, and bind runs per call)."""
    return tuple(inspect.signature(fn).parameters)[1:]


def read_only(value):
    """An ndarray as a read-only view (other values unchanged): spec code cannot write into it. Arrays
    of values (objects, floats) are ``SpecArray`` views, held to the spec language; static arrays
    (ints, bools: masks, positions) stay plain numpy."""
    if isinstance(value, np.ndarray):
        if value.dtype == object or np.issubdtype(value.dtype, np.floating):
            value = value.view(SpecArray)
        elif value.flags.writeable:
            value = value.view()
        value.flags.writeable = False
    return value


class BoundNode:
    """A node of a composite with the backend bound: call it for the forward, ``.vjp`` for the
    backward; arrays go positionally in the node op's order (inputs, non-differentiable inputs, dy),
    params by name (else their defaults)."""

    def __init__(self, impl, B):
        self.impl, self.B = impl, B

    def _values(self, args, kwargs, with_dy: bool) -> dict:
        impl, B = self.impl, self.B
        order = [*impl.inputs, *impl.nondiff] + (["dy"] if with_dy else [])
        vals = {k: (B.c(p.default) if p.symbolic else p.default) for k, p in impl.params.items()}
        vals.update(zip(order, args))
        vals.update(kwargs)
        return vals

    def _backend(self):
        """The backend nodes run on: a backend may give its nodes another (``TraceBackend``)."""
        from vjpcert.core.backends import unwrap
        impl = unwrap(self.B)
        return getattr(impl, "node_backend", impl)

    def __call__(self, *args, **kwargs):
        return wrap(self.impl.bind(self.impl.forward, self._backend(), self._values(args, kwargs, False)))

    def vjp(self, *args, **kwargs):
        return wrap(self.impl.bind(self.impl.vjp, self._backend(), self._values(args, kwargs, True)))


class NodeSet:
    def __init__(self, nodes: Mapping[str, object], B):
        self._nodes, self._B = nodes, B

    def __getattr__(self, name):
        try:
            return BoundNode(self._nodes[name], self._B)
        except KeyError:
            raise SpecError(None, f"no node {name!r}; declared nodes: {sorted(self._nodes)}") from None


REGISTRY: dict[str, Op] = {}


def op(*, inputs: Mapping[str, tuple], output: tuple, dims: list[Dims], nondiff=None, params=None,
       large_dims=None, check_dims=None, assumptions=(), constraints=None, name=None, tags=(),
       kinks=None, sample=None, nodes=None, proofs=("monolithic",), compositional_dims=None,
       modular_dims=None):
    """Declare an op. ``dims`` is the ladder of shapes at which proofs run by default (smallest first;
    prefer non-square sizes, a transposed gradient can hide at m = d); ``check_dims`` is where the
    numeric tier works. ``kinks(B, **inputs)`` returns each entry's distance to a point where the op
    is not differentiable (samplers stay away); ``sample`` gives custom samplers for some inputs.
    ``nodes`` names the sub-ops of a composite; ``proofs`` says how its VJP claims are proved:
    "monolithic" (the whole op at once) and/or "compositional" (nodes, then the wiring);
    ``compositional_dims`` are further (realistic) sizes at which only the compositional VJP proofs
    run: the wiring is proved there directly, the nodes rest on their every-size proofs.
    ``modular_dims`` are production sizes (a ViT-Tiny block) at which the randomised exact test runs
    the spec's own numpy code mod random primes (``symbolic.modular``); an entry may also fix
    structural params, e.g. ``{"m": 197, "D": 192, "F": 768, "heads": 3}``. They are planned by
    ``vjpcert prove --modular`` (and ``vjpcert all --modular``), not by default."""
    if not dims:
        raise SpecError(name, "an op needs at least one entry in dims")

    def register(fn):
        o = Op(fn, name=check_name("op", name or fn.__name__), inputs=inputs, output=output, nondiff=nondiff,
               params=params, dims=dims, large_dims=large_dims, check_dims=check_dims,
               assumptions=tuple(assumptions), constraints=constraints, tags=tags, kinks=kinks,
               sample=sample)
        o.nodes = dict(nodes or {})
        o.proofs = tuple(proofs)
        o.compositional_dims = [dict(d) for d in (compositional_dims or [])]
        o.modular_dims = [dict(d) for d in (modular_dims or [])]
        if o.compositional_dims and "compositional" not in o.proofs:
            raise SpecError(o.name, "compositional_dims need proofs=(..., 'compositional')")
        if "compositional" in o.proofs and not o.nodes:
            raise SpecError(o.name, "a compositional proof needs nodes=...")
        old = REGISTRY.get(o.name)
        if old is not None and getattr(old.module, "__name__", "").startswith("vjpcert.specs.") \
                and getattr(old.module, "__file__", None) != getattr(o.module, "__file__", None):
            raise SpecError(o.name, f"is the name of a built-in op ({old.module.__file__}); "
                                    f"choose another name")
        REGISTRY[o.name] = o
        from vjpcert.core.sources import code_files, snapshot
        for path in code_files(modules=[o.module]):     # hashed as loaded, before anything changes
            snapshot(path)
        return o
    return register


def load_file(path: str | Path) -> list[Op]:
    """Import a user's file of ops and return the ops it defines, in definition order."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(None, f"file not found: {path}")
    from vjpcert.core.sources import add_to_path, forget, purge_user_modules
    mod_name = "vjpcert_user_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    add_to_path(path.parent)              # modules beside the spec import as they would from a script
    purge_user_modules(path)              # ... and as they are on disk now, not as first imported
    forget([path])
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise SpecError(None, f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SpecError as exc:
        raise SpecError(exc.op, f"{exc.problem} (in {path})") from None
    except Exception as exc:  # a user file that raises on import is bad input, named with its cause
        raise SpecError(None, f"{path}: importing it raised {type(exc).__name__}: {exc}") from None
    ops = [v for v in vars(module).values() if isinstance(v, Op) and v.module is module]
    if not ops:
        raise SpecError(None, f"{path}: defines no op (decorate a forward with @op)")
    return ops
