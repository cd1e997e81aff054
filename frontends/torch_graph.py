"""One traced PyTorch graph: ``make_fx`` records a function's forward and its backward as one flat
graph of ATen ops (``trace``), decomposing every op without an exact rule (``torch_rules.RULES``) by
PyTorch's own decompositions until each node has one, and ``TorchGraph`` evaluates that graph node by
node over a backend ``B``. One trace at one dtype: ``vjpcert.frontends.torch_paths`` compares them.
"""
from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from vjpcert.core.registry import SpecError
from vjpcert.frontends import torch_cnn  # noqa: F401  (registers the rules of convolutional networks)
from vjpcert.frontends.torch_rules import MAX_SITES, RULES, _torch
from vjpcert.frontends.constants import DEFAULT_CONSTANTS, Constants
from vjpcert.frontends.values import Context, Val, as_array

MAX_DECOMPOSITION_ROUNDS = 40


# Why a few ops are refused, for the one-line error.
HINTS = {
    "aten.max": "a maximum compares input values (a kink)",
    "aten.relu": "relu has a kink at 0 (a comparison of input values)",
    "aten._local_scalar_dense": "the function reads an input-dependent Python number (.item(), float(), "
                                "a branch on a tensor)",
    "aten.abs": "abs has a kink at 0 (a comparison of input values)",
}
_RANDOM = ("aten.empty", "prims.uniform", "aten.uniform", "aten.normal", "aten.bernoulli", "aten.rand",
           "aten.native_dropout", "prims.normal")
_RANDOM_HINT = ("the function makes random or uninitialised tensors: build submodules in __init__ (a module's "
                "parameters become inputs), run dropout in eval mode (a module op's default), or pass the "
                "tensor as an input")


def _op_name(target) -> str:
    return str(target)


def _has_rule(target) -> bool:
    return _op_name(target) in RULES


class TorchGraph:
    """One traced joint graph: outputs[0] is the forward, outputs[1:] the cotangents."""

    def __init__(self, gm, n_arrays: int, output_shape: tuple, decomposed: list[str], constants: str,
                 op_name: str, dtype: str = "float64"):
        self.gm = gm
        self.op_name = op_name
        self.dtype = dtype              # what it was traced at (torch_paths adds what it was compared with)
        self.explicit, self.compared, self.device_reads = False, (), ()
        self.output_shape = tuple(int(s) for s in output_shape)
        self.decomposed = sorted(decomposed)
        self.constants_mode = constants
        self.locate = None              # op name -> the user's file:line that calls it (set by trace)
        nodes = list(gm.graph.nodes)
        self.placeholders = [n for n in nodes if n.op == "placeholder"]
        if len(self.placeholders) != n_arrays + 1:
            raise SpecError(op_name, f"the traced graph takes {len(self.placeholders)} tensors, expected "
                                     f"{n_arrays + 1}")
        out = [n for n in nodes if n.op == "output"][0]
        self.outputs = list(out.args[0])
        self.order = [n for n in nodes if n.op == "call_function"]
        self._needed = {"forward": self._needed_for(self.outputs[:1]),
                        "backward": self._needed_for(self.outputs[1:]),
                        "all": self._needed_for(self.outputs)}
        self.max_sites = sum(1 for n in self.order if _op_name(n.target) in MAX_SITES)
        self.code = gm.code
        self.lifted = self._lifted(gm, nodes)
        self._scan()

    def _lifted(self, gm, nodes) -> dict:
        """The tensors the trace lifted into the graph as constants (``x[:, [0, 1, 3, 2]]``'s index, a
        ``torch.tensor`` of Python numbers), as static values: integers and booleans exactly. A float
        tensor built from Python numbers is refused: its entries are roundings no one declared."""
        out = {}
        for n in nodes:
            if n.op != "get_attr":
                continue
            t = getattr(gm, n.target)
            if t.is_floating_point() or t.is_complex():
                raise SpecError(self.op_name, f"the function builds a float tensor from Python numbers "
                                              f"({n.target}, shape {tuple(t.shape)}): its entries are roundings "
                                              f"no exact rule can read; pass it as an input (a module's buffer) "
                                              f"or compute it with torch ops from integers")
            a = t.detach().cpu().numpy()
            out[n] = Val(a.astype(bool) if str(t.dtype) == "torch.bool" else a.astype(np.int64), True)
        return out

    def _needed_for(self, roots) -> set:
        seen, stack = set(), [r for r in roots if r is not None]
        while stack:
            n = stack.pop()
            if n in seen or not hasattr(n, "op"):
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return seen

    def _scan(self):
        """What the graph's certificates rest on: how its float constants are read, which dtype
        conversions it makes (read as exact), which ops PyTorch's decompositions replaced."""
        consts = Constants(self.constants_mode, self.dtype)
        self.casts = set()
        for n in self.order:
            for v in _flat_args(n):
                if isinstance(v, float) and np.isfinite(v):
                    consts.read(v)
            dtype = n.kwargs.get("dtype")
            if _op_name(n.target) in ("aten._to_copy.default", "prims.convert_element_type.default") and n.args \
                    and hasattr(n.args[0], "meta") and "val" in n.args[0].meta:
                dtype = dtype or (n.args[1] if len(n.args) > 1 else None)
                src = n.args[0].meta["val"].dtype
                if dtype is not None and dtype != src:
                    self.casts.add(f"{str(src).replace('torch.', '')} -> {str(dtype).replace('torch.', '')}")
        self.readings = dict(consts.readings)
        self.rounded = set(consts.rounded)

    def evaluate(self, B, arrays, part: str) -> list[np.ndarray]:
        ctx = Context(B, Constants(self.constants_mode, self.dtype), self.op_name)
        env = {}
        for ph, a in zip(self.placeholders, arrays):
            env[ph] = Val(as_array(a), False)
        for node, value in self.lifted.items():
            env[node] = value
        needed = self._needed[part]
        for node in self.order:
            if node not in needed:
                continue
            ctx.at = f"{_op_name(node.target)} ({node.name})"
            fn = RULES.get(_op_name(node.target))
            if fn is None:      # trace() guarantees a rule; keep the error if a graph is hand-made
                raise SpecError(self.op_name, f"{_op_name(node.target)} has no exact rule")
            args = _map_args(node.args, env)
            kwargs = {k: _map_args(v, env) for k, v in node.kwargs.items()}
            try:
                env[node] = fn(ctx, *args, **kwargs)
            except SpecError as exc:
                where = self.locate(_op_name(node.target)) if self.locate else ""
                if not where:
                    raise
                raise SpecError(exc.op, f"{where}: {exc.problem}") from None
        ctx.at = "output"
        roots = {"forward": self.outputs[:1], "backward": self.outputs[1:], "all": self.outputs}[part]
        return [ctx.output(env[r]) for r in roots]


def _map_args(a, env):
    if hasattr(a, "op") and hasattr(a, "all_input_nodes"):
        return env[a]
    if isinstance(a, (list, tuple)):
        return type(a)(_map_args(x, env) for x in a)
    return a


def _flat_args(node):
    stack = [*node.args, *node.kwargs.values()]
    while stack:
        a = stack.pop()
        if isinstance(a, (list, tuple)):
            stack.extend(a)
        else:
            yield a


def _describe_error(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    low = str(exc).lower()
    if "convert all tensors to faketensors" in low:
        return ("a tensor the function holds itself that is not an input (a captured constant: a tensor a module "
                "holds unregistered, or its integer buffer, which stays the module's own): register a float one "
                "(self.register_buffer(name, t): a non-differentiable input of a module op) or pass it as an input")
    if "data-dependent" in low or "data dependent" in low or "_local_scalar_dense" in low:
        text += " (the function branches on, or reads, input values: its graph would hold at one point only)"
    return text[:400]


def trace(fn: Callable, shapes: list, n_diff: int, params: Mapping, *, constants: str = DEFAULT_CONSTANTS,
          op_name: str = "?", dtype: str = "float64", probe=None) -> TorchGraph:
    """Trace ``fn(*diff, *nondiff, **params)`` and its backward at these shapes, on fake cpu tensors
    of ``dtype``; ``probe`` (``torch_paths.DeviceProbe``) watches (or answers) the code's reads of the
    device. One trace: ``torch_paths.trace_checked`` is the one that compares dtypes and devices."""
    torch = _torch()
    with probe if probe is not None else contextlib.nullcontext():
        return _trace(torch, fn, shapes, n_diff, params, constants, op_name, dtype)


@functools.lru_cache(maxsize=None)
def _core_decompositions() -> dict:
    """PyTorch's core ATen decompositions as a plain dict, made once per process: the table torch
    returns materialises itself again (about 80 ms) at every lookup of a fresh copy."""
    from torch._decomp import core_aten_decompositions
    return dict(core_aten_decompositions().items())


def _trace(torch, fn, shapes, n_diff, params, constants, op_name, dtype) -> TorchGraph:
    # PyTorch is optional and slow to import: its tracing machinery is loaded with it, at the first trace
    from torch._decomp import decomposition_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.overrides import TorchFunctionMode

    params = dict(params)
    tdt = getattr(torch, dtype)
    sdpa = []

    class SeesAttention(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.nn.functional.scaled_dot_product_attention:
                sdpa.append(True)
            return func(*args, **(kwargs or {}))

    def call(*xs):
        try:
            # attention on its math backend: the fused CPU kernel's backward has no exact rule, and
            # the math path is the formula every backend computes (the assumptions say so)
            with sdpa_kernel(SDPBackend.MATH), SeesAttention():
                out = fn(*xs, **params)
        except SpecError:
            raise
        except Exception as exc:
            from vjpcert.core.tracing import spec_location
            where = spec_location(exc.__traceback__, (str(Path(torch.__file__).resolve().parent),))
            raise SpecError(op_name, (f"{where}: " if where else "") + f"calling the function on tensors of "
                                     f"shapes {shapes} raised {_describe_error(exc)}") from None
        if not isinstance(out, torch.Tensor):
            raise SpecError(op_name, f"the function returned a {type(out).__name__}; it must return one tensor")
        return out

    with FakeTensorMode():
        out_shape = tuple(call(*[torch.zeros(s, dtype=tdt) for s in shapes]).shape)

    def joint(*args):
        diff, rest, dy = args[:n_diff], args[n_diff:-1], args[-1]
        xs = [x.detach().requires_grad_(True) for x in diff]
        with torch.enable_grad():
            out = call(*xs, *rest)
            if not out.requires_grad:
                grads = [None] * len(xs)
            else:
                grads = torch.autograd.grad(out, xs, dy, allow_unused=True)
        return (out, *[torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads)])

    examples = [torch.zeros(s, dtype=tdt) for s in shapes] + [torch.zeros(out_shape, dtype=tdt)]
    core = _core_decompositions()
    table: dict = {}
    decomposed: set[str] = set()
    origin: dict[str, str] = {}          # an op that appeared through a decomposition -> where from
    seen: set[str] = set()
    last: list[str] = []
    for _ in range(MAX_DECOMPOSITION_ROUNDS):
        try:
            gm = make_fx(joint, decomposition_table=table, tracing_mode="fake")(*examples)
            if any(getattr(getattr(n.target, "_schema", None), "is_mutable", False) for n in gm.graph.nodes
                   if n.op == "call_function"):
                gm = make_fx(torch.func.functionalize(gm, remove="mutations"), decomposition_table=table,
                             tracing_mode="fake")(*examples)
        except SpecError:
            raise
        except Exception as exc:
            raise SpecError(op_name, f"tracing with make_fx failed: {_describe_error(exc)}") from None
        present = {_op_name(n.target) for n in gm.graph.nodes if n.op == "call_function"}
        for t in present - seen:
            if last:
                origin.setdefault(t, origin.get(last[0], last[0]))
        seen |= present
        missing = list(dict.fromkeys(n.target for n in gm.graph.nodes       # in graph order
                                     if n.op == "call_function" and not _has_rule(n.target)))
        new = [t for t in missing if t in core or t in decomposition_table]
        if not new:
            break
        for t in new:
            table[t] = core.get(t) or decomposition_table[t]
            decomposed.add(_op_name(t))
        last = [_op_name(t) for t in new]
    if missing:
        t = _op_name(missing[0])
        source = origin.get(t)
        packet = ".".join((source or t).split(".")[:2])
        hint = HINTS.get(packet, "") or (_RANDOM_HINT if t.startswith(_RANDOM) else "")
        more = f" (also without one: {', '.join(_op_name(m) for m in missing[1:4])})" if len(missing) > 1 else ""
        where = _locate(torch, joint, shapes, out_shape, tdt, {t, source} - {None})
        raise SpecError(op_name, (f"{where}: " if where else "") + f"{t} has no exact rule and PyTorch has no "
                                                                  f"decomposition for it"
                                 + (f" (it comes from PyTorch's decomposition of {source})" if source else "")
                                 + more + (f"; {hint}" if hint else ""))
    if sdpa:
        decomposed.add("F.scaled_dot_product_attention by its math backend (the fused kernels and their own "
                       "backward are not what is proved)")
    graph = TorchGraph(gm, len(shapes), out_shape, sorted(decomposed), constants, op_name, dtype)
    graph.locate = lambda name: _locate(torch, joint, shapes, out_shape, tdt, {name, origin.get(name)} - {None})
    graph.against_eager = lambda strict=True: _against_eager(torch, gm, joint, call, shapes, n_diff, out_shape, tdt,
                                                             op_name, strict)
    return graph


EAGER_LAYOUTS = ("contiguous", "strided", "transposed", "expanded")


def _against_eager(torch, gm, joint, call, shapes, n_diff, out_shape, tdt, op_name, strict) -> None:
    """The graph against PyTorch's eager run of the same function on real tensors
    (``frontends.eager``), the inputs and dy also as views in other memory layouts."""
    from vjpcert.frontends.eager import check_against_eager

    def tensor(x):
        return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(tdt)

    def arrays(outs):
        return [o.detach().to(torch.float64).numpy() for o in outs]

    def graph_run(inputs, dy):
        with torch.no_grad():
            return arrays(gm(*map(tensor, inputs), tensor(dy)))

    def eager_run(inputs, dy, layout):
        xs = [_laid_out(torch, tensor(x), layout) for x in inputs]
        if layout == "expanded":           # one value everywhere, in a view of stride 0
            d = tensor(dy).reshape(-1)[:1].reshape((1,) * len(out_shape)).expand(out_shape) if dy.size else tensor(dy)
        else:
            d = _laid_out(torch, tensor(dy), layout)
        return arrays(joint(*xs, d))

    def forward_run(inputs):
        with torch.no_grad():
            return arrays([call(*map(tensor, inputs))])
    # on one thread: an OpenMP parallel region would start a team of threads in this process, and the
    # prover forks each strategy (a child of a process with a team hangs in its next parallel region)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        check_against_eager(op_name, shapes, n_diff, out_shape, torch.finfo(tdt).eps, graph_run, eager_run,
                            EAGER_LAYOUTS, forward_run, strict)
    finally:
        torch.set_num_threads(threads)


def _laid_out(torch, t, layout: str):
    """``t``'s values in another memory layout: a strided view into a larger tensor, or the reverse
    order of its axes in memory (a transposed view); as it is otherwise."""
    if layout == "strided":
        buf = t.new_zeros(tuple(t.shape) + (2,))
        buf[..., 0] = t
        return buf[..., 0]
    if layout == "transposed" and t.ndim > 1:
        order = list(reversed(range(t.ndim)))
        return t.permute(order).contiguous().permute(order)
    return t


class _Found(BaseException):      # through the except Exception of the call it stops
    def __init__(self, stack):
        self.stack = stack


def _locate(torch, joint, shapes, out_shape, tdt, names: set) -> str:
    """The user's ``file:line`` that calls one of the ATen ops ``names`` first (the function run
    eagerly on zeros, stopped at that op), or "" (an op only a decomposition or a C++ derivative
    formula calls has no line of the user's)."""
    import traceback

    from torch.utils._python_dispatch import TorchDispatchMode
    from vjpcert.core.tracing import spec_location

    def functional(name: str) -> str:          # aten.uniform_.default is aten.uniform.default, in place
        parts = name.split(".")
        return ".".join([parts[0], parts[1].rstrip("_"), *parts[2:]]) if len(parts) > 1 else name

    class Find(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if functional(_op_name(func)) in names:
                raise _Found(traceback.extract_stack())
            return func(*args, **(kwargs or {}))
    skip = (str(Path(torch.__file__).resolve().parent),)
    try:
        with Find():
            joint(*[torch.zeros(s, dtype=tdt) for s in shapes], torch.zeros(out_shape, dtype=tdt))
    except _Found as found:
        return spec_location(found.stack, skip)
    except Exception:          # noqa: BLE001  (a function that fails eagerly on zeros: no line to show)
        return ""
    return ""
