"""The field of one modular trial: arithmetic mod p (``arith.ModP``), the keyed atom hashes and the
counts the false-pass bound reads (``symbolic.modular.backend`` describes the semantics)."""
from __future__ import annotations

import hashlib
import time
import weakref
from fractions import Fraction

import flint
import numpy as np

from vjpcert.core.derivatives import STEP_AT_KINK
from vjpcert.symbolic.modular import kernels as mk
from vjpcert.symbolic.modular.arith import ModP


class NeedAnotherPrime(Exception):
    """A constant square root sqrt(c) has no value mod this prime: draw another prime. ``root`` names
    the c, so the next trials can test their prime for it before any work (``modular._Point``)."""

    def __init__(self, message: str, root: int | None = None):
        super().__init__(message)
        self.root = root


# ------------------------------------------------------------------------------ bounds
# ``symbolic.modular.bound``: (deg N, log2 |N|_1) and the denominators by provenance; ``None`` is an
# exact 0.
CIRCLE_N, CIRCLE_H = 2, 1.0     # sin, cos = 2u / (1 + u^2), (1 - u^2) / (1 + u^2) in one atom u

# How ``_atom_value`` identifies atoms by their arguments, per counted kind: the odd and even kinds hash
# |a| and carry its sign; a fold is an argument whose atom is a constant (exp(0) = 1, log(1) = 0, ...).
SIGNED = frozenset({"erf", "tanh", "step", "circle"})
FOLDS = {"exp": (0,), "log": (1,), "sqrt": (0, 1), "erf": (0,), "tanh": (0,), "step": (0,), "circle": (0,)}


def _joined(rep, idx):
    """(later, first): the entries of ``idx`` (increasing places) whose value ``rep`` an earlier entry
    of ``idx`` has, in increasing order, and for each the least place of its value."""
    s = np.sort(rep[idx])
    again = s[1:][s[1:] == s[:-1]]                           # a value met n times is here n - 1 times
    if not again.size:
        return idx[:0], idx[:0]
    if again.size * 64 < idx.size:                           # a few: keep only their values' entries
        twice = again[np.concatenate(([True], again[1:] != again[:-1]))]
        r = rep[idx]
        idx = idx[twice[np.searchsorted(twice, r).clip(max=twice.size - 1)] == r]
    r = rep[idx]
    order = np.argsort(r)
    r = r[order]
    starts = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
    sizes = np.diff(np.append(starts, r.size))
    head = np.empty(idx.size, dtype=np.int64)                # each entry's class's least position in idx
    head[order] = np.repeat(np.minimum.reduceat(order, starts), sizes)
    later = np.flatnonzero(head != np.arange(idx.size))
    return idx[later], idx[head[later]]


# ------------------------------------------------------------------------------ the field
class Field(ModP):
    """The arithmetic mod p of one trial (``arith.ModP``) and its keyed atom hashes."""

    def __init__(self, p: int, keys: dict, sqrt_pi: int):
        super().__init__(p)
        self.keys = keys                       # kind -> (k1, k2) uint64 keys of the atom hash
        self.sqrt_pi = sqrt_pi
        self.atom_values: dict[str, list] = {}  # kind -> the arguments hashed, in order (until digested)
        self.atom_sizes: dict[str, int] = {}    # kind -> how many entries were hashed
        self._partition: str | None = None      # the digest of how the atoms were identified, once taken
        self.digest_seconds = 0.0               # what taking it cost
        self.atom_arg: dict[str, tuple] = {}   # kind -> (deg N, deg D, log2|N|_1, log2|D|_1) of the arguments
        self.pole_degree = 0.0                 # sum of the degrees of every inverted entry's numerator
        self.inverted_atoms: set = set()       # atom sources whose inverse was taken as a variable
        self.plain_atoms: set = set()          # atom sources that entered arithmetic themselves
        self.sqrt_atoms: dict = {}             # source -> the values of one B.sqrt call's atoms
        self.atoms_seen: set = set()           # (kind, id of the argument's computation) counted
        self._roots: dict[int, int] = {}
        self._kept: dict = {}                  # computation id -> its residues, held (``value``)
        self._alive = weakref.WeakValueDictionary()   # ... while some array still holds them

    def end_trial(self):
        """Drop what only the trial itself needs -- its cached values and the matmuls' work arrays,
        GBs at production dims -- keeping the counts the bound reads and the atoms' arguments, which
        ``atom_partition`` digests only where a second trial is compared with this one (the trials'
        fields are kept)."""
        self._kept.clear()
        self._alive.clear()
        self._buffers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.end_trial()
        return False

    def value(self, sid, compute, keep: bool = False):
        """The residues of the computation ``sid``, computed once per trial where it pays: the backward
        recomputes forward values (an attention's scores and probabilities, an MLP's hidden layer), and
        those are most of a block's matmuls after the tangents'. A sid names the operation, its
        structural details and every operand's sid and shape (``derive``), so one sid is one value --
        the same identity ``atom`` already counts atoms by. ``keep``: held for the rest of the trial (a
        matmul's product, K multiply-adds an entry); else held only while some array still holds it (an
        entrywise product is cheaper to compute again than to keep: holding every one of them too, a
        GPT-2 block's trial peaked at 1.9 GiB instead of 1.3). Values are never
        written in place (a write copies: ``views``), so a value found is the value computed. None (a
        value of unknown provenance): computed."""
        if sid is None:
            return compute()
        v = self._kept.get(sid)
        if v is None:
            v = self._alive.get(sid)
        if v is None:
            v = compute()
            if keep or not isinstance(v, np.ndarray):      # a numpy scalar has no weak reference
                self._kept[sid] = v
            else:
                self._alive[sid] = v
        return v

    @property
    def atoms_used_both_ways(self) -> int:
        """How many inverted root atoms s also entered arithmetic as s (from any call: the same atom is
        recomputed by the backward, so they are matched by value -- two distinct atoms of one value
        count too, which only overcounts): the residual is a Laurent polynomial in those."""
        inverted = [self.sqrt_atoms[s].ravel() for s in self.inverted_atoms]
        plain = [self.sqrt_atoms[s].ravel() for s in self.plain_atoms if s in self.sqrt_atoms]
        if not inverted or not plain:
            return 0
        inverted = np.concatenate(inverted)
        return int(np.isin(inverted, np.concatenate(plain)).sum())

    @property
    def atom_count(self) -> dict[str, int]:
        """kind -> entries hashed in this evaluation, a computation counted once (``atom``): a bound on
        its distinct atoms as *polynomials* (distinct values would undercount exactly when two
        distinct arguments collide)."""
        return dict(self.atom_sizes)

    @property
    def atom_partition(self) -> str | None:
        """The digest of how this trial identified its atoms (``_partition_digest``), taken on first
        use, after which the arguments are dropped; None once they were dropped undigested
        (``forget_atom_arguments``), which agrees with no trial."""
        if self._partition is None and self.atom_values is not None:
            start = time.perf_counter()
            self._partition = self._partition_digest()
            self.digest_seconds += time.perf_counter() - start
            self.atom_values = None
        return self._partition

    def forget_atom_arguments(self):
        """Drop the atoms' arguments without digesting them: a check that ran one trial compares it
        with nothing (a one-trial check's memory is then that of its trial alone)."""
        if self._partition is None:
            self.atom_values = None

    def _partition_digest(self) -> str:
        """A digest of how this trial identified its atoms, which is all a collision can change: for
        every kind, the atoms in the order they were computed (entry i of the concatenated calls), the
        entries that folded to a constant (exp(0) = 1, ...), and every entry that joined an earlier
        one's class, as the pair (the entry, its class's first entry) -- with, for the kinds hashed by
        |a|, whether its sign differs from that first one's. Every label is an entry's place, never a
        value, so trials of one computation whose digests agree identified the same atoms, folds and
        signs (``check.false_pass_bound`` turns that into a bound that falls with the number of trials).
        One sort finds whether any value is met twice (most blocks: none); where some are, the entries
        of their classes are ordered by value and each class's first entry is its least place (a
        ViT-Tiny block's 570,000 atoms, most of them met twice: about 0.04 s)."""
        h = hashlib.sha256()
        half = self.p // 2
        for kind in sorted(self.atom_values):
            parts = self.atom_values[kind]
            vals = np.concatenate(parts) if parts else np.zeros(0, np.int64)
            neg = vals > half if kind in SIGNED else None
            rep = vals if neg is None else np.where(neg, self.p - vals, vals)
            h.update(f"{kind}|{[v.size for v in parts]}|".encode())
            plain = np.ones(rep.size, dtype=np.bool_)
            for fold in FOLDS.get(kind, ()):
                at = rep == fold
                h.update(np.flatnonzero(at).tobytes() + b"|")
                plain &= ~at
            later, first = _joined(rep, np.flatnonzero(plain))
            h.update(later.tobytes() + b"|" + first.tobytes() + b"|")
            if neg is not None:
                h.update(np.packbits(neg[later] ^ neg[first]).tobytes())
        return h.hexdigest()

    def _circle(self, kind: str, v):
        """sin and cos of one argument lie on the circle: with u a keyed hash of |a|,
        cos = (1 - u^2) / (1 + u^2) and sin = 2u / (1 + u^2) (times the sign of a): sin^2 + cos^2 = 1
        holds exactly (its only algebraic relation), sin is odd, cos even, sin(0) = 0, cos(0) = 1."""
        p = self.p
        upper = v > p // 2
        u = self.hash("circle", np.where(upper, p - v, v))
        u2 = self.mul(u, u)
        w = self.inv(self.add(u2, np.ones_like(u2)))
        if kind == "cos":
            out = self.mul(self.sub(np.ones_like(u2), u2), w)
            return np.where(v == 0, 1, out)
        out = self.mul(self.add(u, u), w)
        out = np.where(upper, (p - out) % p, out)
        return np.where(v == 0, 0, out)

    # ---- scalars
    def residue(self, q: Fraction) -> int:
        q = Fraction(q)
        den = q.denominator % self.p
        if den == 0:
            raise NeedAnotherPrime(f"the constant {q} has a denominator divisible by p")
        return q.numerator * pow(den, -1, self.p) % self.p

    def prime_root(self, c: int) -> int:
        r = self._roots.get(c)
        if r is None:
            if c % self.p == 0:
                raise NeedAnotherPrime(f"sqrt({c}) with p | {c}", root=c)
            if flint.fmpz(c).jacobi(self.p) != 1:
                raise NeedAnotherPrime(f"sqrt({c}) has no value mod p", root=c)
            r = self._roots[c] = int(flint.fmpz(c).sqrtmod(self.p))
        return r

    # ---- atoms
    def hash(self, kind: str, v):
        """splitmix64's finaliser keyed twice, mix(mix(v ^ k1) ^ k2), reduced mod p, in one fused loop
        (``kernels.hash_flat``)."""
        k1, k2 = self.keys[kind]
        v = np.asarray(v, dtype=np.int64)
        out = np.empty(v.shape, dtype=np.int64)
        mk.run(mk.hash_flat, v.size, np.ascontiguousarray(v).reshape(-1), out.reshape(-1),
               np.uint64(k1), np.uint64(k2), np.uint64(self.p))
        return out if out.ndim else out[()]          # a numpy scalar for a scalar, as numpy's own ops give

    def atom(self, kind: str, v, arg_bound, sid=None):
        """The atom kind(v), keyed by the value v, with the ring's folds and parities. ``sid`` names
        how the argument was computed: the same computation again (the backward recomputing the
        forward) is the same atoms, not new ones to count."""
        v = np.asarray(v, dtype=np.int64)
        # sin and cos of one argument share one circle atom u: their pairs are counted together
        counted = "circle" if kind in ("sin", "cos") else kind
        if sid is None or (kind, sid) not in self.atoms_seen:
            # the arguments, in order: how they were identified is digested at the trial's end
            self.atom_values.setdefault(counted, []).append(v.reshape(-1))
            self.atom_sizes[counted] = self.atom_sizes.get(counted, 0) + v.size
            if sid is not None:
                self.atoms_seen.add((kind, sid))
        arg = arg_bound.numbers() if arg_bound is not None else (0, 0, 0.0, 0.0)
        old = self.atom_arg.get(counted, arg)
        self.atom_arg[counted] = tuple(max(x, y) for x, y in zip(old, arg))
        return self.value(None if sid is None else ("atom", sid), lambda: self._atom_value(kind, v))

    def _atom_value(self, kind: str, v):
        p = self.p
        if kind in ("sin", "cos"):
            return self._circle(kind, v)
        if kind in ("erf", "tanh"):                     # odd: f(-a) = -f(a), f(0) = 0
            upper = v > p // 2
            h = self.hash(kind, np.where(upper, p - v, v))
            out = np.where(upper, (p - h) % p, h)
            return np.where(v == 0, 0, out)
        if kind == "step":                              # a free Boolean: S(-a) = 1 - S(a), S(0) the convention
            upper = v > p // 2
            h = self.hash(kind, np.where(upper, p - v, v))
            out = np.where(upper, (1 - h) % p, h)
            return np.where(v == 0, self.residue(STEP_AT_KINK), out)
        h = self.hash(kind, v)
        if kind == "exp":
            return np.where(v == 0, 1, h)
        if kind == "sqrt":
            return np.where(v == 0, 0, np.where(v == 1, 1, h))
        if kind == "log":
            return np.where(v == 1, 0, h)
        return h


