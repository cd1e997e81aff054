"""FrontendOp: a framework function as an ordinary ``Op``.

The forward and the backward are one traced graph per input shape (and parameter values), evaluated
over whichever backend ``B`` a checker passes; the graph's first output is the forward, the others are
the cotangents the framework computes (its autograd formulas, or a custom backward). So the symbolic
tier proves ``backward = J^T dy`` with J derived from the traced forward, exactly as for a spec.

With ``spec=`` the forward is also tied to a certified spec by a law, ``matches_spec[<spec>]``: the
traced forward minus the spec's forward must be identically 0 (exactly, in the symbolic tier).
"""
from __future__ import annotations

import hashlib
import inspect
import json
from fractions import Fraction
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from vjpcert.core.registry import Op, Param, SpecError, check_name, dim_size
from vjpcert.frontends.precision import CAST_WORDS, DEFAULT, device_words, identity_of, traced_words
from vjpcert.frontends.constants import DEFAULT_CONSTANTS, constants_shifted, decimal_of, describe_readings


def call_by_name(fn: Callable, names: list, params: Mapping | None, op_name: str | None) -> Callable:
    """``fn`` as the frontends call it, ``fn(*arrays, **params)``, unless a parameter is one of fn's
    positional ones before the last array: F.batch_norm(input, running_mean, running_var, weight,
    bias, training=...) with weight and bias inputs and running_mean=None a parameter. Then the arrays
    are passed by their declared names, which must then be fn's own (else the call is ambiguous and
    refused, naming the parameter)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return fn
    positional = [p.name for p in sig.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    clash = [k for k in (params or {}) if k in positional[:len(names)]]
    if not clash:
        return fn
    missing = [n for n in names if n not in sig.parameters]
    if missing:
        raise SpecError(op_name, f"the parameter {clash[0]!r} is {getattr(fn, '__name__', 'the function')}'s "
                                 f"argument {positional.index(clash[0]) + 1}, before the arrays end: name the "
                                 f"arrays as its arguments are named to pass them by name ({missing} are not)")

    def by_name(*arrays, **kw):
        return fn(**dict(zip(names, arrays)), **kw)
    by_name.__name__ = getattr(fn, "__name__", "fn")
    return by_name


def _signature(names) -> inspect.Signature:
    """The spec calling convention (the backend first, then the arrays by name), with the backend
    positional-only: a framework function's own argument may be called ``B`` (``A @ B``)."""
    P = inspect.Parameter
    return inspect.Signature([P("backend", P.POSITIONAL_ONLY)]
                             + [P(n, P.POSITIONAL_OR_KEYWORD) for n in names])


def _jsonable(v):
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, Fraction):
        return str(v)
    return v


class FrontendOp(Op):
    """An op whose forward and backward are a framework's, traced into graphs.

    ``tracer(shapes, params, compare=True) -> graph`` traces at one list of input shapes
    (differentiable inputs, then non-differentiable ones) and one set of parameter values (with
    ``compare`` False: at the op's dtype only, its graph at the other dtypes not compared, for the
    output's shape and the op's identity); a graph has ``evaluate(B, arrays,
    part)`` (part "forward" or "backward"), ``output_shape``, ``code`` (its text, for the op's
    identity) and ``assumptions`` (its constants, casts, decompositions, in words)."""

    def __init__(self, *, name: str, framework: str, tracer: Callable, module, inputs: Mapping[str, tuple],
                 fn: Callable | None = None,
                 dims: list[dict], nondiff: Mapping[str, tuple] | None = None, params: Mapping | None = None,
                 output: tuple | None = None, large_dims=None, check_dims=None, modular_dims=None,
                 spec: Op | None = None,
                 constants: str = DEFAULT_CONSTANTS, doc: str = "", framework_version: str = "",
                 dtype: str | None = None, identity: Mapping | None = None):
        if not inputs:
            raise SpecError(name, "a framework op needs at least one differentiable input")
        if not dims:
            raise SpecError(name, "a framework op needs dims: the shapes it is traced and proved at")
        self.name = check_name("op", name)
        self._fn = fn                   # the framework function (its module's code is the op's code)
        self._tracer = tracer
        self._graphs: dict = {}         # graphs to prove: compared at every dtype the op is held to
        self._traced: dict = {}         # graphs at the op's dtype alone: their shape and code
        self._uncompared = False        # while the claims are listed (``_features``)
        self.framework = framework
        self.framework_version = framework_version
        self.constants = constants
        self.trace_dtype = dtype        # the dtype asked for; None: float64, compared with lower precisions
        self.spec = spec
        self._sha = None
        self._identity = dict(identity or {})     # how the function is made (a module's class and init)
        params = {k: (v if isinstance(v, Param) else Param(v, symbolic=False)) for k, v in (params or {}).items()}
        for k, p in params.items():
            if p.symbolic:
                raise SpecError(name, f"param {k!r}: a framework function receives parameters as Python "
                                      f"values, so they are fixed (symbolic=False) in its proofs")
        self._user_nondiff = dict(nondiff or {})
        names = [*inputs, *self._user_nondiff, *params]

        def forward(backend, /, **values):
            return self._evaluate(backend, values, "forward")[0]

        def backward(backend, /, **values):
            return tuple(self._evaluate(backend, values, "backward"))
        forward.__signature__ = _signature(names)
        backward.__signature__ = _signature([*names, "dy"])
        forward.__name__, backward.__name__ = name, f"{name}_vjp"
        # the output's shape is read from the graph when first asked for: nothing is traced while a
        # file of ops is imported, so a refused op refuses itself when it is planned, not its neighbours
        self._output = tuple(output) if output else None
        super().__init__(forward, name=name, inputs=inputs, output=(), nondiff=self._user_nondiff,
                         params=params, dims=dims, large_dims=large_dims, check_dims=check_dims,
                         assumptions=(), constraints=None)
        self.vjp = backward
        self.modular_dims = [dict(d) for d in (modular_dims or [])]     # production sizes (--modular)
        self.module = module
        self.doc = doc or (inspect.getdoc(module) if module is not None else "") or ""
        if spec is not None:
            self._add_spec_law(spec)

    # ------------------------------------------------------------------ graphs
    def _shapes(self, values: Mapping) -> tuple:
        return tuple(tuple(np.shape(values[n])) for n in [*self.inputs, *self._user_nondiff])

    @staticmethod
    def _key(shapes: tuple, params: Mapping) -> tuple:
        return shapes, tuple(sorted((k, _freeze(v)) for k, v in params.items()))

    def graph(self, shapes: tuple, params: Mapping):
        """The graph to prove at these shapes and parameter values."""
        key = self._key(shapes, params)
        g = self._graphs.get(key)
        if g is None:
            g = self._graphs[key] = self._tracer([list(s) for s in shapes], dict(params))
        return g

    def traced(self, shapes: tuple, params: Mapping):
        """The graph at the op's dtype, compared with nothing (its output shape and code are those of
        ``graph``, which also compares the other dtypes): what the op's declaration and identity need,
        so listing an op's certificates (``vjpcert verify``) traces each op once, not once per dtype."""
        key = self._key(shapes, params)
        g = self._graphs.get(key) or self._traced.get(key)
        if g is None:
            g = self._traced[key] = self._tracer([list(s) for s in shapes], dict(params), compare=False)
        return g

    def _shapes_at(self, dims: Mapping) -> tuple:
        dims = self.resolve_dims(dims)
        return tuple(self.shape(d, dims) for d in [*self.inputs.values(), *self._user_nondiff.values()])

    def graph_at(self, dims: Mapping, params: Mapping | None = None):
        """The traced graph at some dims (default parameter values unless given)."""
        return self.graph(self._shapes_at(dims), {**self.param_values(), **(params or {})})

    def _evaluate(self, B, values: Mapping, part: str):
        params = {k: values[k] for k in self.params}
        g = (self.traced if self._uncompared else self.graph)(self._shapes(values), params)
        arrays = [values[n] for n in [*self.inputs, *self._user_nondiff]]
        if part != "forward":
            arrays.append(values["dy"])
        return g.evaluate(B, arrays, part)

    @property
    def output(self) -> tuple:
        """The declared output shape, or entries read from the traced graph at each dims (exact),
        labelled with the dim whose size they have at the first dims when only one dim has it."""
        if self._output is None:
            self._output = self._traced_output_decl(self.dims[0])
        return self._output

    @output.setter
    def output(self, value):           # Op.__init__ assigns (); the shape is the declared or traced one
        pass

    def _traced_output_decl(self, dims) -> tuple:
        shapes = tuple(tuple(dim_size(e, dims, self.name) for e in d)
                       for d in [*self.inputs.values(), *self._user_nondiff.values()])
        out = self.traced(shapes, self.param_values()).output_shape
        names = {}
        for k, v in dims.items():
            names.setdefault(int(v), []).append(k)
        return tuple(_OutputSize(self, axis, names.get(int(size), [None])[0]
                                 if len(names.get(int(size), [])) == 1 else None)
                     for axis, size in enumerate(out))

    def _features(self) -> tuple[bool, bool]:
        """As for a spec: whether the graph, evaluated with a free shift, calls ``B.max_shift`` and
        meets a kink. Which claims an op has does not depend on the other dtypes' graphs, so listing
        them (``vjpcert verify``) evaluates the graph at the op's dtype alone (``traced``)."""
        self._uncompared = True
        try:
            return super()._features()
        finally:
            self._uncompared = False

    # ------------------------------------------------------------------ rounded constants
    def rounded_constants(self, dims: Mapping) -> list[str]:
        """The graph's float constants read as the decimals of roundings: full-precision floats no
        named real matches (all of them with ``constants="decimal"``)."""
        return sorted(self.graph_at(dims).rounded)

    def constants_shifted(self, shifts: Mapping[str, int]):
        return constants_shifted(shifts)

    # ------------------------------------------------------------------ the spec law
    def _add_spec_law(self, spec: Op):
        missing = [n for n in [*spec.inputs, *spec.nondiff] if n not in self.inputs and n not in self.nondiff]
        if missing or list(spec.inputs) != list(self.inputs):
            raise SpecError(self.name, f"spec {spec.name!r} takes inputs {list(spec.inputs)} "
                                       f"(and {list(spec.nondiff)}); this op takes {list(self.inputs)} "
                                       f"(and {list(self.nondiff)}): name them the same")
        mine = [*self.inputs, *self._user_nondiff, *self.params]
        op = self

        def matches_spec(B, **values):
            y = op.bind(op.forward, B, values)
            sv = {n: values[n] for n in [*spec.inputs, *spec.nondiff]}
            for k, p in spec.params.items():
                if k in op.params:
                    v = values[k]
                    sv[k] = B.c(decimal_of(v) if isinstance(v, float) else v) if p.symbolic else v
                else:
                    sv[k] = B.c(p.default) if p.symbolic else p.default
            ref = spec.bind(spec.forward, B, sv)
            if np.shape(y) != np.shape(ref):
                raise SpecError(op.name, f"forward has shape {np.shape(y)}, spec {spec.name} {np.shape(ref)}")
            return y, ref
        matches_spec.__signature__ = _signature(mine)
        matches_spec.__doc__ = (f"The traced forward equals the forward of the spec {spec.name!r} "
                                f"(parameters: {self._spec_params_words(spec)}).")
        self.law(matches_spec, name=f"matches_spec[{spec.name}]")

    def _spec_params_words(self, spec: Op) -> str:
        out = []
        for k, p in spec.params.items():
            if k in self.params:
                v = self.params[k].default
                out.append(f"{k} = {decimal_of(v) if isinstance(v, float) else v} (this op's)")
            else:
                out.append(f"{k} = {p.default} (the spec's default)")
        return ", ".join(out) or "no parameters"

    # ------------------------------------------------------------------ identity and words
    @property
    def assumptions(self) -> tuple:
        """What a certificate of this op rests on, in words: the general statements, and what the
        graphs at the op's dims (its proof ladder and its check dims) read their constants as and
        which decompositions they hold."""
        readings, decomposed, casts, reads, compared, eager = {}, set(), set(), {}, None, set()
        for d in [*self.dims, self.check_dims]:
            try:
                g = self.graph_at(d)
            except SpecError:
                continue
            eager.add(getattr(g, "eager", None))
            readings.update(g.readings)
            decomposed |= set(g.decomposed)
            casts |= set(g.casts)
            reads.update(dict.fromkeys(getattr(g, "device_reads", ())))
            mine = getattr(g, "compared", ())
            compared = mine if compared is None else tuple(x for x in compared if x in mine)
        specific = describe_readings(self.constants, readings)
        if decomposed:
            specific.append(f"{self.framework}'s own decompositions replace: " + ", ".join(sorted(decomposed)))
        if casts:
            specific.append(f"the graph converts between float dtypes ({', '.join(sorted(casts))}): read as exact "
                            f"(the proof is about the real-number function; rounding is the numeric tiers' business)")
        at = self.trace_dtype or DEFAULT
        words = [f"the {self.framework} code as traced ({self.framework} {self.framework_version}): forward "
                 f"and backward are the traced graph, one per input shape, evaluated op by op",
                 traced_words(self.framework, at, self.trace_dtype is not None, compared or ()),
                 device_words(self.framework, list(reads)),
                 f"every float constant in the graph is read as the exact number stated (decimals as "
                 f"printed at {at} unless read as a named constant); {CAST_WORDS}",
                 *sorted(e for e in eager if e)]
        if self.params:
            words.append("parameters are fixed at the values given: "
                         + ", ".join(f"{k} = {p.default!r}" for k, p in self.params.items()))
        if any(getattr(self.graph_at(d), "max_sites", 0) for d in self.dims[:1]):
            words.append("each maximum of input values in the graph (a softmax's shift) is B.max_shift: 0 in "
                         "exact arithmetic, the maximum in floats; the graph is the framework's function "
                         "because nothing depends on it (the claim max_shift_free)")
        if self.spec is not None:
            words.append(f"matches_spec[{self.spec.name}] compares with the spec "
                         + (f"at {w}" if (w := self._spec_params_words(self.spec)) != "no parameters" else
                            "(no parameters)"))
        return tuple(words + specific)

    @assumptions.setter
    def assumptions(self, value):      # Op.__init__ assigns (); the words are derived from the graph
        pass

    def built_modules(self) -> list[tuple[object, object]]:
        """(target, module) of each module a module op has built (``modules.ModuleTarget``), else []."""
        return [(self._fn, m) for m in self._fn.modules()] if hasattr(self._fn, "modules") else []

    @property
    def source_files(self) -> list[Path]:
        """The user's code the op comes from (its module and what that imports, as for a spec:
        ``core.sources``; a framework's own installed code is covered by its version and the graph),
        and the spec it is tied to."""
        from vjpcert.core.sources import code_files
        files = set(code_files(modules=[self.module] if self.module is not None else [],
                               functions=[self._fn] if self._fn is not None else []))
        if self.spec is not None:
            files |= set(self.spec.source_files)
        return sorted(files)

    @property
    def spec_sha256(self) -> str:
        """The op's identity: the frontends' normalised code (``core.code_hash.definition_sha256``: a
        checker's hash leaves it out), the framework's version, the declaration (with
        the dtype and device it is traced at: a float32 graph is another op than the float64 one),
        the user's source file(s), the spec it is tied to, and the traced graph at the first dims
        (a framework release that changes a derivative formula changes the graph)."""
        if self._sha is None:
            from vjpcert.core.code_hash import definition_sha256
            from vjpcert.core.sources import files_sha256
            h = hashlib.sha256()
            h.update(definition_sha256(__package__).encode())
            h.update(f"{self.framework} {self.framework_version}".encode())
            decl = {"name": self.name, "traced": identity_of(self.trace_dtype),
                    "inputs": self.inputs, "nondiff": self.nondiff,
                    "params": {k: repr(p.default) for k, p in self.params.items()},
                    "dims": self.dims, "large_dims": self.large_dims, "check_dims": self.check_dims,
                    **({"modular_dims": self.modular_dims} if self.modular_dims else {}),
                    "constants": self.constants, "output": [str(e) for e in self.output],
                    **({"made": self._identity} if self._identity else {})}
            h.update(json.dumps(_jsonable(decl), sort_keys=True, default=str).encode())
            h.update(files_sha256(self.source_files).encode())
            h.update(self.traced(self._shapes_at(self.dims[0]), self.param_values()).code.encode())
            self._sha = h.hexdigest()
        return self._sha

    def __repr__(self):
        return f"<{self.framework} op {self.name}: inputs {list(self.inputs)}>"


class _OutputSize:
    """An output axis whose size is read from the traced graph (no dim name fits it uniquely)."""

    def __init__(self, op: FrontendOp, axis: int, label: str | None):
        self.op, self.axis, self.label = op, axis, label

    def __call__(self, dims):
        return self.op.traced(self.op._shapes_at(dims), self.op.param_values()).output_shape[self.axis]

    def __str__(self):
        return self.label or f"traced[{self.axis}]"

    __repr__ = __str__


def _freeze(v):
    if isinstance(v, list):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v
