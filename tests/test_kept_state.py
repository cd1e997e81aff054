"""The fingerprint of the state spec code keeps (vjpcert/kept_state.py), on its own: what it sees change,
what it must not call a change. The command-level cases (a counter in every place a spec can keep one)
are in tests/test_soundness.py."""
import collections
import functools
import itertools
import types

import numpy as np
import pytest

from vjpcert.kept_state import changed, fingerprint


def _module(**values):
    m = types.ModuleType("users_module")
    m.__dict__.update(values)
    return m


def _prints(module):
    return fingerprint([module], [], lambda name: name == "users_module" or name.endswith("users_module.py"))


def _deep(levels):
    top = node = []
    for _ in range(levels):
        node.append([])
        node = node[0]
    return top, node


MUTATIONS = {        # name -> (the value a global holds, a change made in place)
    "list": ([0], lambda v: v.__setitem__(0, 1)),
    "dict": ({"n": 0}, lambda v: v.__setitem__("n", 1)),
    "set": ({1}, lambda v: v.add(2)),
    "deque": (collections.deque([1]), lambda v: v.append(2)),
    "array": (np.zeros(3), lambda v: v.__setitem__(1, 1.0)),
    "object array": (np.array([[0]], dtype=object), lambda v: v.__setitem__((0, 0), 1)),
    "count": (itertools.count(), next),
    "iterator": (iter(range(5)), next),
    "list in a tuple": (([0],), lambda v: v[0].append(1)),
    "cache entry handed out": (functools.cache(lambda: [0]), lambda f: f().append(1)),
    "a change 50,000 levels deep": (_deep(50_000), lambda v: v[1].append(1)),
    "rng": (np.random.default_rng(0), lambda g: g.random()),
}


@pytest.mark.parametrize("name", MUTATIONS)
def test_a_change_in_place_is_seen(name):
    value, change = MUTATIONS[name]
    if name == "cache entry handed out":
        value()                                # the entry exists before: only its change counts
    m = _module(STATE=value)
    before = _prints(m)
    assert changed(before, _prints(m)) == []   # the walk is stable: nothing changed, nothing named
    change(value)
    where = "STATE (users_module)" + ("[()]" if name == "cache entry handed out" else "")
    assert changed(before, _prints(m)) == [where]


def test_a_rebinding_and_a_new_global_are_seen():
    m = _module(N=0)
    before = _prints(m)
    m.N = 1
    m.ADDED = 2
    assert changed(before, _prints(m)) == ["ADDED (users_module)", "N (users_module)"]


def test_a_cache_of_a_pure_function_may_fill_and_a_read_only_table_is_not_state():
    table = np.arange(4.0)
    table.flags.writeable = False

    @functools.cache
    def square(n):
        return (n * n, table)
    m = _module(square=square, TABLE=table)
    before = _prints(m)
    square(3)
    square(4)
    assert changed(before, _prints(m)) == []


def test_a_torch_tensor_is_read_by_its_bytes_not_its_repr():
    """A weight changed in place below the digits its repr prints is a change (and a large tensor is read
    without printing it: its repr, or pickling it, would reach every element)."""
    torch = pytest.importorskip("torch")
    big = torch.zeros(1024, 1024, dtype=torch.float64)
    m = _module(W=big, H=torch.zeros(3, dtype=torch.bfloat16))
    before = _prints(m)
    big[7, 7] += 1e-12
    m.H[0] += 1
    assert changed(before, _prints(m)) == ["H (users_module)", "W (users_module)"]


def test_the_import_system_s_bookkeeping_is_not_state_and_the_module_s_own_names_are(tmp_path):
    """Reading ``__spec__.cached`` makes the spec remember it, as the import system does: not a change.
    What spec code writes on its spec or loader, or a rebinding of ``__file__``, is."""
    import importlib.util
    path = tmp_path / "users_module.py"
    path.write_text("N = 0\n")
    spec = importlib.util.spec_from_file_location("users_module", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    m.__spec__._cached = None              # as a spec whose cached path nothing has asked for yet
    before = _prints(m)
    assert m.__spec__.cached and m.__spec__._cached and changed(before, _prints(m)) == []
    for write in (lambda: setattr(m.__spec__, "calls", 1), lambda: setattr(m.__loader__, "calls", 1),
                  lambda: setattr(m, "__package__", "elsewhere")):
        before = _prints(m)
        write()
        assert changed(before, _prints(m)), write


def test_a_loader_shared_by_many_modules_is_read_by_identity_not_walked():
    """A shared import hook (pytest's assertion rewriting loads every test module) fills its caches as
    anything imports: not the spec's state. An attribute spec code binds on it is."""
    hook = types.SimpleNamespace(seen={}, session=object())
    m = _module(N=0, __loader__=hook)
    before = _prints(m)
    hook.seen["sympy.core"] = False            # an import elsewhere, while the claim ran
    assert changed(before, _prints(m)) == []
    hook.calls = 1
    assert changed(before, _prints(m)) == ["__loader__ (users_module)"]


def test_reading_an_object_does_not_change_its_class_and_a_value_spec_code_puts_there_does():
    """The fingerprint reads a library's object by what pickling keeps of it, and pickling caches the
    class's slot names on the class (``__slotnames__``): a module-level ``jax.custom_vjp`` was refused
    for the change the fingerprint itself made. A value other than the slots' names is still state."""
    library = type("Slotted", (), {"__slots__": ("a", "__b"), "__module__": "a_library"})
    users = type("UsersSlotted", (), {"__slots__": ("c",), "__module__": "users_module"})
    m = _module(Lib=library, Mine=users, obj=library(), mine=users())   # the classes read first, as `import jax` is
    before = _prints(m)
    assert "__slotnames__" in vars(library) and vars(library)["__slotnames__"] == ["a", "_Slotted__b"]
    assert changed(before, _prints(m)) == []
    users.__slotnames__ = ["calls"]
    assert changed(before, _prints(m)) == ["Mine (users_module)"]
    before = _prints(m)
    library.__slotnames__ = ["calls"]
    assert changed(before, _prints(m)) == ["Lib (users_module)", "obj (users_module)"]


def test_a_library_s_frame_is_not_the_standard_library_s_in_a_virtual_environment():
    """A virtual environment's lib/pythonX.Y holds its site-packages: a frame there is a library's
    ("other"), so a library drawing random numbers while a spec module loads is not the spec's draw."""
    import json
    import random

    from vjpcert.core.reads import _frame_kind
    assert _frame_kind(np.__file__) == "other" and _frame_kind(pytest.__file__) == "other"
    assert _frame_kind(random.__file__) == "stdlib" and _frame_kind(json.__file__) == "stdlib"
