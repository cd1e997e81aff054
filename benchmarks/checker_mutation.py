"""Who checks the checker: small bugs injected into the checkers' own code, one at a time, in a copy of
the repository, each run against a targeted test selection: *killed* (a test went red, and passes again
on the unmutated copy), *survived* (all green; the mutant's entry says why that is harmless, or a test
was written to kill it), *timeout*, *stale* (its site is no longer in the code), *flaky*.

    .venv/bin/python benchmarks/checker_mutation.py            # every mutant; writes the report
    .venv/bin/python benchmarks/checker_mutation.py --only sym-zero-digits-half --no-report
    .venv/bin/python benchmarks/checker_mutation.py --list     # the mutants and where they apply

Not mutmut: mutmut 3 mutates code inside functions only (these thresholds are module constants), sweeps
every operator, and names modules by path (core/x.py -> core.x), while the folders here are installed as
vjpcert.core, vjpcert.symbolic, ... (pyproject's package-dir): its copy would not be what is imported.

The copy: the working tree in <tmp>/repo, and the installed layout mirrored in <tmp>/pkg (pkg/vjpcert =
vjpcert/, pkg/vjpcert/core = core/, ... from package-dir), first on PYTHONPATH, ahead of the editable
install's finder; tests run in <tmp>/repo with PYTHONSAFEPATH=1 (its own vjpcert/ is never imported),
no bytecode (a same-size mutant restored within a second would be served a stale .pyc) and, for a Numba
file's mutant, its own NUMBA_CACHE_DIR. Controls before any mutant, each stopping the run if it fails:
every package imports from the mirror; every selection runs on the unmutated copy (tests red there are
deselected and listed, so a tree others are editing cannot make every mutant look killed); a canary
(raise at the top of each mutated file) turns its selection red. Sites are found in the AST (scope and
node source), so lines may move; only the node's text is replaced, the rest of the file kept byte for byte.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "reports" / "benchmarks" / "checker_mutation"
COMMAND = ".venv/bin/python benchmarks/checker_mutation.py"
CANARY = "checker-mutation canary: this file's code is under test"
PYTEST = ["-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=-rfE"]
IGNORE = shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ipynb_checkpoints")

# ---------------------------------------------------------------------------------------------- selections
# name -> (pytest arguments: files, node ids, -k); each run with -x and a timeout of 3x its baseline + 60 s
M = "tests/test_checker_mutants.py::"
SELECTIONS: dict[str, list[str]] = {
    "symbolic": [M + "test_a_claim_decidable_only_numerically_off_by_1e_45_is_never_checked",
                 M + "test_with_the_exact_rungs_out_of_reach_1e_45_is_never_checked",
                 M + "test_the_correct_twin_of_the_numeric_only_claim_is_proved",
                 M + "test_the_witness_does_not_call_a_1e_45_residual_numerically_zero",
                 M + "test_the_witness_calls_the_correct_twin_numerically_zero",
                 M + "test_false_pass_bounds_are_at_least_their_schwartz_zippel_term",
                 M + "test_the_bound_field_bounds_degrees_and_coefficients",
                 "tests/test_symbolic_core.py", "tests/test_soundness.py",
                 "tests/test_prove_registry.py", "-k",
                 "not prove_registry or (mutant and (gelu_tanh or log_softmax))"],
    "modarith": [M + "test_products_just_below_a_multiple_of_p_are_exact",
                 M + "test_matmul_entries_just_below_a_multiple_of_p_are_exact",
                 M + "test_karatsuba_high_diagonals_just_below_a_multiple_of_p_are_exact",
                 M + "test_inverses_of_large_arrays_are_exact",
                 "tests/test_modular_arith.py"],
    "modular": [M + "test_false_pass_bounds_are_at_least_their_schwartz_zippel_term",
                M + "test_a_vanishing_residual_whose_bound_is_not_below_the_limit_is_inconclusive",
                M + "test_the_modular_bound_bounds_coefficients_of_sums",
                "tests/test_modular_bound.py", "tests/test_modular.py",
                "-k", "not vit_tiny_block_vanishes"],
    "numeric": [M + "test_a_backward_off_by_1e_30_fails_the_numeric_tier",
                M + "test_the_conditioning_allowance_is_capped_and_a_small_derivative_is_not_zero",
                "tests/test_numeric.py", "-k",
                "not gpt2 and not vit_block and not llama_block and not mhsa and not attention"],
    "rounding": ["tests/test_soundness.py", "tests/test_numeric.py", "-k",
                 "reference or float32 or float_path"],
    "tolerance": [M + "test_the_tolerance_rule_holds_an_implementation_to_k_times_the_dtype_spec_plus_a_floor",
                  "tests/test_impl_checks.py", "tests/test_kernel_models.py"],
    "wiring": [M + "test_a_structural_factor_dropped_by_the_backward_fails_the_wiring", "tests/test_composition.py", "tests/test_composition_domains.py", "-k",
               "not gpt2 and not vit and not llama"],
    "frontend": [M + "test_aten_rules_evaluate_to_what_pytorch_computes", "tests/test_frontend_torch.py"],
}
FILE_SELECTION = {
    "symbolic/settings.py": "symbolic", "symbolic/fixed/strategies.py": "symbolic", "symbolic/fixed/prover.py": "symbolic",
    "symbolic/fixed/fields.py": "symbolic",
    "symbolic/modular/arith.py": "modarith", "symbolic/modular/kernels.py": "modarith",
    "symbolic/modular/bound.py": "modular", "symbolic/modular/check.py": "modular",
    "numeric/check.py": "numeric", "numeric/settings.py": "numeric",
    "core/rounding.py": "rounding", "core/tolerance.py": "tolerance",
    "symbolic/composition/wiring.py": "wiring", "symbolic/composition/algebra.py": "wiring",
    "frontends/pytorch.py": "frontend", "frontends/values.py": "frontend",
}


# ---------------------------------------------------------------------------------------------- mutants
@dataclass
class Mutant:
    id: str
    file: str
    scope: str            # "Class.method", "function" or "" (module level)
    target: str           # the node's source (compared as an AST)
    op: tuple             # the mutation, see ``mutate``
    desc: str
    harmless: str | None = None      # why a survivor is an equivalent mutant (shown in the report)
    selection: str | None = None     # overrides FILE_SELECTION
    nth: int | None = None           # which match in source order, where the target occurs more than once


MUTANTS = [
    # -- the proof ladder: numbers (symbolic/settings.py)
    Mutant("sym-zero-digits-half", "symbolic/settings.py", "", "ZERO_DIGITS = 80", ("scale", 0.5),
           "the witness's 'numerically zero' threshold halved (80 -> 40 digits)"),
    Mutant("sym-zero-digits-70", "symbolic/settings.py", "", "ZERO_DIGITS = 80", ("value", "70"),
           "the witness's 'numerically zero' threshold lowered to 70 digits"),
    Mutant("sym-fail-rel-loose", "symbolic/settings.py", "", "FAIL_REL = 1e-25", ("value", "1e-3"),
           "a witness failure needs a relative residual above 1e-3 instead of 1e-25"),
    Mutant("sym-modp-trials-one", "symbolic/settings.py", "", "MODP_TRIALS = 3", ("value", "1"),
           "the mod-p ladder step runs one trial instead of three"),
    Mutant("sym-exact-points-none", "symbolic/settings.py", "", "EXACT_WITNESS_POINTS = 3", ("value", "0"),
           "the exact rational witness evaluates no point"),
    Mutant("sym-modular-max-false-pass", "symbolic/settings.py", "", "MODULAR_MAX_FALSE_PASS = 1e-06",
           ("value", "1.0"), "the modular tier accepts any false-pass bound", selection="modular"),
    # -- the strategies (symbolic/fixed/strategies.py)
    Mutant("strat-witness-zero-ge", "symbolic/fixed/strategies.py", "witness", "worst_digits >= tol.ZERO_DIGITS",
           ("cmp", ast.Gt), "'numerically zero' needs strictly more than ZERO_DIGITS digits",
           harmless="digits are a continuous measure: exactly ZERO_DIGITS digits has probability zero, "
                    "and a residual that small is rounding either way"),
    Mutant("strat-witness-best-point", "symbolic/fixed/strategies.py", "witness",
           "min(worst_digits, _digits(abs(hi[j]), scale_hi, tol.HIGH_DPS))", ("call", "max"),
           "the witness keeps the best point's digits instead of the worst's"),
    Mutant("strat-witness-or", "symbolic/fixed/strategies.py", "witness",
           "rel_lo > tol.FAIL_REL and abs(hi[j] - lo[j]) <= tol.PERSIST_REL * abs(hi[j])", ("boolop", ast.Or),
           "a witness fails a claim when its residual is large OR persists (not both)"),
    Mutant("strat-exact-never-differs", "symbolic/fixed/strategies.py", "exact_witness", "a != b", ("value", "False"),
           "the exact rational witness never reports a disagreement"),
    Mutant("strat-ring-linear-negated", "symbolic/fixed/strategies.py", "ring", "F.reduce_linear(R).is_zero()",
           ("not",), "the ring proves a claim whose residual is NOT zero modulo the linear relations"),
    Mutant("strat-relations-negated", "symbolic/fixed/strategies.py", "relations", "not left", ("not",),
           "the relations step proves a claim when something is left"),
    Mutant("strat-modp-ignores-nonzero", "symbolic/fixed/strategies.py", "modp", "R != 0", ("value", "False"),
           "the mod-p step ignores a nonzero residual"),
    Mutant("strat-points-no-scale", "symbolic/fixed/strategies.py", "random_point",
           "Fraction(v, tol.WITNESS_DEN) * scale", ("drop", "right"),
           "witness points are never drawn at the wide and narrow scales"),
    # -- the ladder's decisions (symbolic/fixed/prover.py)
    Mutant("prover-witness-failure-ignored", "symbolic/fixed/prover.py", "prove_claim", 'w["status"] == "failed"',
           ("value", "False"), "the ladder ignores the mpmath witness's `failed`"),
    Mutant("prover-rational-guard-dropped", "symbolic/fixed/prover.py", "prove_claim",
           'rational and rr["status"] == "nonzero"', ("value", "False"),
           "a rational claim with an exactly nonzero residual may still end `checked`",
           harmless="the ladder's later rule (a nonzero the relations leave is inconclusive, never checked) takes "
                    "the same claims: only the wide exact witness is lost, so `failed` may become `inconclusive` "
                    "for a rational residual that vanished at all 3 random exact points, never the reverse"),
    Mutant("prover-unknown-is-zero", "symbolic/fixed/prover.py", "prove_claim", 'w["status"] == "zero"',
           ("value", "w['status'] in ('zero', 'unknown')"),
           "an undecided witness counts as numerically zero: `checked`", nth=1),
    # -- the fields (symbolic/fixed/fields.py)
    Mutant("fields-odd-sign-swapped", "symbolic/fixed/fields.py", "RingField._normalise_sign",
           "-1 if kind in self.ODD else 1", ("value", "1 if kind in self.ODD else -1"),
           "erf, tanh and sin are treated as even and cos as odd"),
    Mutant("fields-sqrt-any-square", "symbolic/fixed/fields.py", "RingField.sqrt", "e and var in self.nonneg",
           ("drop", "right"), "sqrt(v^2) = v for any variable, not only those known >= 0"),
    Mutant("fields-pythagoras-wrong", "symbolic/fixed/fields.py", "RingField.relations", "self.one - c * c",
           ("value", "self.one + c * c"), "the relation sin^2 = 1 + cos^2 instead of 1 - cos^2"),
    Mutant("fields-ring-bound-degree-max", "symbolic/fixed/fields.py", "BoundField.mul", "a[0] + b[0]",
           ("call2", "max"), "the degree bound of a product is the larger degree, not the sum"),
    Mutant("fields-bound-carry-dropped", "symbolic/fixed/fields.py", "BoundField.add",
           "hi + math.log2(1 + 2.0 ** (lo - hi))", ("drop", "right"),
           "the coefficient bound of a sum forgets the carry (|a + b|_1 <= |a|_1 + |b|_1)"),
    Mutant("fields-sz-term-dropped", "symbolic/fixed/fields.py", "false_pass_bound",
           "deg / p_min + max(bits, 1.0) / log2p * per_prime", ("drop", "left"),
           "the ladder's false-pass bound drops the Schwartz-Zippel term deg / p"),
    Mutant("fields-trials-squared", "symbolic/fixed/fields.py", "false_pass_bound", "min(1.0, eps) ** trials",
           ("value", "min(1.0, eps) ** (2 * trials)"), "the false-pass bound counts every trial twice"),
    Mutant("fields-prime-even", "symbolic/fixed/fields.py", "random_prime",
           "rng.randrange(2 ** (PRIME_BITS - 1), 2 ** PRIME_BITS) | 1", ("drop", "right"),
           "candidates for the random prime are not made odd",
           harmless="BPSW rejects every even candidate, so only the number of draws changes, never the prime "
                    "nor its distribution"),
    Mutant("fields-modp-fold-ge", "symbolic/fixed/fields.py", "ModPField._odd_even", "a > self.p // 2",
           ("cmp", ast.GtE), "the sign fold of odd/even atoms mod p includes (p - 1) / 2",
           harmless="it changes the fold only at the one residue (p - 1) / 2, hit with probability 1 / p "
                    "(< 2^-62) per atom"),
    # -- the modular arithmetic (symbolic/modular/kernels.py, symbolic/modular/arith.py)
    Mutant("kern-mulmod-quotient-plus-one", "symbolic/modular/kernels.py", "_mulmod_small",
           "np.int64(np.float64(x) * np.float64(y) * inv_p)", ("add", 1),
           "the mod-p product's float64 quotient estimate one too high"),
    Mutant("kern-mulmod-quotient-minus-one", "symbolic/modular/kernels.py", "_mulmod_small",
           "np.int64(np.float64(x) * np.float64(y) * inv_p)", ("add", -1),
           "the mod-p product's float64 quotient estimate one too low"),
    Mutant("kern-recombine-quotient-plus-one", "symbolic/modular/kernels.py", "_recombine3_1",
           "np.int64((d0 + d1 * float(1 << LIMB_BITS) + d2 * float(1 << 2 * LIMB_BITS)) * inv_p)", ("add", 1),
           "the matmul recombination's quotient estimate one too high"),
    Mutant("kern-karatsuba-high-quotient-plus-one", "symbolic/modular/kernels.py", "_karatsuba5_1",
           "np.int64((c3 + p2 * float(1 << LIMB_BITS)) * inv_p)", ("add", 1),
           "Karatsuba's high-diagonal quotient estimate one too high",
           harmless="the high part only feeds _mulmod1(hi, r60), whose truncated estimates make a negative "
                    "input's remainder come out in (-p, 2p) too, so a high part one p too low is reduced there; "
                    "the products just below a multiple of p reach it and the output is unchanged"),
    Mutant("kern-submod-no-correction", "symbolic/modular/kernels.py", "submod", "r + (r >> 63 & p)",
           ("drop", "right"), "x - y mod p without adding p back to a negative difference"),
    Mutant("kern-half-31", "symbolic/modular/kernels.py", "", "HALF = 30", ("value", "31"),
           "the elementwise product splits its second factor at bit 31 instead of 30",
           harmless="with 31-bit halves every partial product is below 2^93 and its quotient below 2^34, so "
                    "the float64 estimate is still within 1 and the remainder in (-p, 2p): exact as before"),
    Mutant("arith-max-contraction-doubled", "symbolic/modular/arith.py", "",
           "MAX_CONTRACTION = (1 << 53) // (LIMBS << 2 * LIMB_BITS)", ("value", "(1 << 54) // (LIMBS << 2 * LIMB_BITS)"),
           "the longest exact float64 contraction doubled (limb sums pass 2^53)"),
    Mutant("arith-karatsuba-max-doubled", "symbolic/modular/arith.py", "",
           "KARATSUBA_MAX_CONTRACTION = (1 << 53) >> 2 * (LIMB_BITS + 1)", ("value", "(1 << 54) >> 2 * (LIMB_BITS + 1)"),
           "Karatsuba's longest exact chunk doubled"),
    Mutant("arith-chunks-floor", "symbolic/modular/arith.py", "ModP.matmul", "-(-K // limit)",
           ("value", "max(1, K // limit)"), "the number of chunks rounded down: a chunk may exceed the limit"),
    Mutant("arith-sum-half-shift", "symbolic/modular/arith.py", "ModP.sum", "1 << 31", ("value", "1 << 30"),
           "a sum's high halves are weighted 2^30 instead of 2^31"),
    Mutant("arith-inverse-exponent", "symbolic/modular/arith.py", "ModP.inv", "self.p - 2", ("value", "self.p - 1"),
           "inverses of large arrays as a^(p-1) instead of a^(p-2)"),
    Mutant("arith-prime-range", "symbolic/modular/arith.py", "ModP.__init__",
           "2 ** PRIME_LO_BITS <= p < 2 ** (PRIME_LO_BITS + 1)",
           ("value", "2 ** PRIME_LO_BITS <= p < 2 ** (PRIME_LO_BITS + 2)"),
           "the modular backend accepts primes up to 2^61"),
    # -- the modular bound (symbolic/modular/bound.py, symbolic/modular/check.py)
    Mutant("bound-mul-degree-max", "symbolic/modular/bound.py", "mul", "a.n + b.n", ("call2", "max"),
           "the degree of a product of arrays is the larger degree, not the sum"),
    Mutant("bound-add-carry-dropped", "symbolic/modular/bound.py", "add",
           "max(a.h + k - a.k, b.h + k - b.k) + 1.0", ("drop", "right"),
           "the coefficient bits of a sum of arrays forget the carry bit"),
    Mutant("bound-sum-distinct-once", "symbolic/modular/bound.py", "sum_axes", "count * deg", ("drop", "left"),
           "a sum meets each varying denominator once, not once per distinct factor"),
    Mutant("bound-distinct-off-by-one", "symbolic/modular/bound.py", "_distinct_along",
           "int((np.diff(x, axis=1) != 0).sum(axis=1).max()) + 1", ("drop", "right"),
           "the count of distinct denominators along an axis is one short"),
    Mutant("modular-sz-term-dropped", "symbolic/modular/check.py", "false_pass_bound",
           "HASH_BIAS * n / p_min + divides(h)", ("drop", "left"),
           "the modular tier's false-pass bound drops the Schwartz-Zippel term"),
    Mutant("modular-enough-le", "symbolic/modular/check.py", "_enough", "per ** done < tol.MODULAR_MAX_FALSE_PASS",
           ("cmp", ast.LtE), "trials stop when the bound reaches the limit, not when it is below it",
           harmless="the bound is a product of floats: it equals 1e-6 exactly with probability zero"),
    Mutant("modular-bound-limit-ignored", "symbolic/modular/check.py", "check_modular",
           'bound["total"] >= tol.MODULAR_MAX_FALSE_PASS', ("value", "False"),
           "a vanishing residual is `checked-probabilistic` whatever its false-pass bound"),
    Mutant("modular-rational-nonzero-inconclusive", "symbolic/modular/check.py", "check_modular",
           'out["status"] == "nonzero"', ("value", "False"), "a nonzero residual without atoms is not `failed`",
           nth=2),
    # -- the numeric tier (numeric/settings.py, numeric/check.py)
    Mutant("num-method-fraction-half", "numeric/settings.py", "", '0.95', ("scale", 0.5),
           "the digits mpmath.diff must deliver halved (0.95 -> 0.475 of dps)", nth=0),
    Mutant("num-margin-30", "numeric/settings.py", "", "MARGIN_DIGITS = 6", ("value", "30"),
           "the numeric margin raised from 6 to 30 digits"),
    Mutant("num-persist-gain-huge", "numeric/settings.py", "", "PERSIST_GAIN = 1.0", ("value", "100.0"),
           "every shortfall counts as persisting when redone at twice the digits",
           harmless="it only reaches claims short of their digits and can only turn `inconclusive` into `failed`: "
                    "with 20 guard digits no correct claim here falls short, and a wrong one is `failed` either way"),
    Mutant("num-guard-digits-half", "numeric/settings.py", "", "GUARD_DIGITS = 20", ("scale", 0.5),
           "the guard digits halved (20 -> 10)"),
    Mutant("num-persists-flipped", "numeric/check.py", "check_claim", "digits2 <= worst + tol.PERSIST_GAIN",
           ("cmp", ast.GtE), "a shortfall persists when it improves at twice the digits", nth=0),
    Mutant("num-conditioning-uncapped", "numeric/check.py", "_conditioning_loss",
           "min(loss, tol.MAX_CONDITIONING_LOSS)", ("value", "loss"),
           "the conditioning allowance is not capped at the guard digits"),
    Mutant("num-zero-gradient-always", "numeric/check.py", "_compare_vjp",
           "scale <= ctx.mpf(10) ** (tol.ZERO_GRADIENT_DIGITS - dps) * natural", ("value", "True"),
           "every directional derivative is measured against its natural scale", nth=1),
    # -- the rounding and tolerance models (core/rounding.py, core/tolerance.py)
    Mutant("round-add-drops-operand", "core/rounding.py", "Rounded.__add__", "self.e + o.e + self.B.r(v)",
           ("value", "self.e + self.B.r(v)"), "the running error of a sum forgets the second operand's error"),
    Mutant("round-cf-half", "core/rounding.py", "", "C_F = 8.0", ("scale", 0.5),
           "transcendental calls are allowed 2 ulps instead of 4",
           harmless="it only tightens the running bound (numpy's and scipy's functions stay within 2 ulps at the "
                    "sampled points): it could fail a correct float path, never pass a wrong one"),
    Mutant("round-inv-first-order", "core/rounding.py", "Rounded._inv", "ea / (a * (a - ea))",
           ("value", "ea / (a * a)"), "the error of 1/a to first order only",
           harmless="it lowers the bound by a term of order u^2 relative, inside BOUND_SLACK (1e-6): the bound "
                    "only tightens, by less than the slack"),
    Mutant("tol-k-backward-doubled", "core/tolerance.py", "", "K_BACKWARD = 3.0", ("scale", 2),
           "implementations' backwards may be 6x, not 3x, as inexact as the dtype spec"),
    Mutant("tol-nonfinite-dropped", "core/tolerance.py", "compare", "err <= limit and not nonfinite",
           ("drop", "right"), "a non-finite output is not failed by itself",
           harmless="a NaN or inf output makes err NaN or inf, and err <= limit is then already False"),
    Mutant("tol-floor-zero", "core/tolerance.py", "", "FLOOR_ROUNDINGS = 4", ("value", "0"),
           "no floor of the output's own rounding"),
    # -- the wiring canonical form (symbolic/composition/wiring.py, symbolic/composition/algebra.py)
    Mutant("wire-smat-eq-shape-only", "symbolic/composition/algebra.py", "SMat.__eq__",
           "isinstance(o, SMat) and self._key == o._key", ("drop", "right"),
           "every two structural matrices compare equal",
           harmless="matrices are compared only as parts of dict keys, after their hashes (of the content) "
                    "matched: two different matrices meet only on a 64-bit hash collision"),
    Mutant("wire-content-dropped", "symbolic/composition/algebra.py", "canonical", "g not in (0, 1)",
           ("value", "False"), "a structural matrix's integer content stays in the matrix (not normalised)",
           harmless="both sides then keep the content in the same matrix, so equal words stay equal and different "
                    "ones different; a factor held in a matrix on one side and in the coefficient on the other "
                    "would be failed (completeness, not soundness), which no composite here produces"),
    Mutant("wire-identity-data", "symbolic/composition/algebra.py", "SMat.is_identity",
           "r == c and self.m.nnz == r and bool(np.all(self.m.indices == np.arange(r))) and bool(np.all(self.m.data == 1))",
           ("value", "r == c and self.m.nnz == r and bool(np.all(self.m.indices == np.arange(r)))"),
           "a diagonal matrix counts as the identity whatever its entries"),
    Mutant("wire-transpose-not-reversed", "symbolic/composition/algebra.py", "transpose_word", "reversed(word)",
           ("value", "word"), "the transpose of a word keeps its order"),
    Mutant("wire-other-inputs-counted", "symbolic/composition/wiring.py", "_compare", "t.base != base", ("value", "False"),
           "words of J^T dy ending in another input's tangent are counted"),
    # -- the ATen rules (frontends/pytorch.py, frontends/values.py)
    Mutant("aten-rsub-swapped", "frontends/pytorch.py", "_rsub", 'c.binary("-", y, c.binary("*", x, alpha))',
           ("value", 'c.binary("-", c.binary("*", x, alpha), y)'), "aten.rsub(x, y) read as alpha x - y"),
    Mutant("aten-addmm-beta-dropped", "frontends/pytorch.py", "_addmm", "beta != 1", ("value", "False"),
           "aten.addmm ignores beta"),
    Mutant("aten-var-no-correction", "frontends/pytorch.py", "_prims_var", "count - correction",
           ("value", "count"), "prims.var divides by the count, ignoring the correction", nth=1),
    Mutant("values-alpha-ignored", "frontends/values.py", "Context.binary", "alpha is not None and alpha != 1",
           ("value", "False"), "aten.add / aten.sub ignore alpha"),
    Mutant("values-sigmoid-sign", "frontends/values.py", "Context.unary", "1 / (1 + B.exp(-a))",
           ("value", "1 / (1 + B.exp(a))"), "sigmoid(x) read as sigmoid(-x)"),
    Mutant("values-expm1-constant", "frontends/values.py", "Context.unary", "B.exp(a) - 1", ("drop", "right"),
           "expm1(x) read as exp(x)"),
    Mutant("values-log-softmax-sign", "frontends/values.py", "Context.softmax",
           "s - B.log(B.exp(s).sum(-1, keepdims=True))", ("value", "s + B.log(B.exp(s).sum(-1, keepdims=True))"),
           "log-softmax adds its normaliser"),
    Mutant("values-named-constant-any", "frontends/values.py", "recognise", "float(value) == av", ("value", "True"),
           "a float is read as the first named constant whose rational is small, bit-exact or not"),
]


# ---------------------------------------------------------------------------------------------- AST sites
class SiteError(Exception):
    pass


def _parse_target(text: str) -> ast.AST:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return ast.parse(text).body[0]


def _scope_node(tree: ast.Module, scope: str) -> ast.AST:
    node = tree
    for name in filter(None, scope.split(".")):
        found = [n for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                 and n.name == name]
        if not found:
            raise SiteError(f"no scope {scope!r}")
        node = found[0]
    return node


def locate(m: Mutant, source: str) -> ast.AST:
    tree = ast.parse(source)
    scope = _scope_node(tree, m.scope)
    want = _parse_target(m.target)
    hits = sorted((n for n in ast.walk(scope) if type(n) is type(want) and ast.dump(n) == ast.dump(want)),
                  key=lambda n: (n.lineno, n.col_offset))
    if len(hits) <= (m.nth or 0):
        raise SiteError(f"{m.target!r} not found in {m.scope or 'the module'} ({len(hits)} matches)")
    if m.nth is None and len(hits) > 1:
        raise SiteError(f"{m.target!r} is ambiguous in {m.scope or 'the module'} ({len(hits)} matches): set nth")
    return hits[m.nth or 0]


def mutate(op: tuple, node: ast.AST) -> ast.AST:
    """The mutated node. ops: ("scale", f) a number times f; ("value", src) the node replaced by src;
    ("add", k) node + k; ("cmp", Op) the comparison's operator; ("boolop", Op) and <-> or; ("not",) the
    negation; ("drop", "left"|"right") a binary operation (or a two-operand boolean) reduced to one side;
    ("call", name) the call's function renamed; ("call2", name) a binary operation as name(left, right)."""
    kind = op[0]
    if kind == "value":
        return _parse_target(op[1])
    if kind == "scale":
        if not (isinstance(node, ast.Constant) and isinstance(node.value, (int, float))):
            raise SiteError("scale needs a number")
        v = node.value * op[1]
        return ast.Constant(int(v) if isinstance(node.value, int) and float(v).is_integer() else v)
    if kind == "add":
        return ast.BinOp(node, ast.Add() if op[1] > 0 else ast.Sub(), ast.Constant(abs(op[1])))
    if kind == "cmp":
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            raise SiteError("cmp needs a single comparison")
        return ast.Compare(node.left, [op[1]()], node.comparators)
    if kind == "boolop":
        return ast.BoolOp(op[1](), node.values)
    if kind == "not":
        return ast.UnaryOp(ast.Not(), node)
    if kind == "drop":
        if isinstance(node, ast.BinOp):
            return node.right if op[1] == "left" else node.left
        if isinstance(node, ast.BoolOp) and len(node.values) == 2:
            return node.values[0] if op[1] == "right" else node.values[1]
        raise SiteError("drop needs a binary operation")
    if kind == "call":
        return ast.Call(ast.Name(op[1]), node.args, node.keywords)
    if kind == "call2":
        return ast.Call(ast.Name(op[1]), [node.left, node.right], [])
    raise SiteError(f"unknown op {op!r}")


def _offset(lines: list[bytes], lineno: int, col: int) -> int:
    return sum(len(line) for line in lines[:lineno - 1]) + col


def apply(m: Mutant, source: str) -> tuple[str, int]:
    """(mutated source, line): the node's segment replaced by the mutant's source, in parentheses
    (keeps precedence wherever the node stood); every other byte kept."""
    node = locate(m, source)
    target = node.value if isinstance(node, ast.Assign) else node      # a constant: its value
    text = f"({ast.unparse(mutate(m.op, target))})"
    raw = source.encode()
    lines = raw.splitlines(keepends=True)
    start = _offset(lines, target.lineno, target.col_offset)
    end = _offset(lines, target.end_lineno, target.end_col_offset)
    out = (raw[:start] + text.encode() + raw[end:]).decode()
    if out == source:
        raise SiteError("the mutant is the original")
    compile(out, m.file, "exec")
    return out, node.lineno


def canary(source: str) -> str:
    """``raise RuntimeError(CANARY)`` as the first statement after the module docstring and
    ``from __future__`` imports (which must come first)."""
    tree = ast.parse(source)
    after = 0
    for stmt in tree.body:
        doc = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)
        if doc and after == 0 or isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            after = stmt.end_lineno
            continue
        break
    lines = source.splitlines(keepends=True)
    return "".join(lines[:after]) + f"raise RuntimeError({CANARY!r})\n" + "".join(lines[after:])


# ---------------------------------------------------------------------------------------------- the copy
def _package_dirs() -> dict[str, str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-dir"]


class Copy:
    """The working tree copied to ``tmp/repo`` and the installed layout mirrored in ``tmp/pkg``."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.repo = tmp / "repo"
        self.pkg = tmp / "pkg"
        shutil.copytree(ROOT, self.repo, ignore=IGNORE, symlinks=True)
        self.mirror: dict[str, Path] = {}               # top-level folder -> its place in the mirror
        for pkg, folder in sorted(_package_dirs().items(), key=lambda kv: kv[0].count(".")):
            dest = self.pkg.joinpath(*pkg.split("."))
            shutil.copytree(self.repo / folder, dest, dirs_exist_ok=True, ignore=IGNORE)
            self.mirror[folder] = dest
        self.originals: dict[str, tuple[str, int]] = {}

    def paths(self, rel: str) -> list[Path]:
        top, _, rest = rel.partition("/")
        return [self.repo / rel, self.mirror[top] / rest]

    def write(self, rel: str, text: str):
        for path in self.paths(rel):
            if rel not in self.originals:
                self.originals[rel] = (path.read_text(), path.stat().st_mtime_ns)
            path.write_text(text)
            os.utime(path, ns=(time.time_ns(), time.time_ns()))

    def restore(self, rel: str):
        text, mtime = self.originals[rel]
        for path in self.paths(rel):
            path.write_text(text)
            os.utime(path, ns=(mtime, mtime))            # Numba's cache of the original stays valid

    def source(self, rel: str) -> str:
        return self.originals[rel][0] if rel in self.originals else (self.repo / rel).read_text()

    def env(self, numba_dir: str = "base") -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
        env.update(PYTHONPATH=str(self.pkg), PYTHONSAFEPATH="1", PYTHONDONTWRITEBYTECODE="1",
                   NUMBA_CACHE_DIR=str(self.tmp / "numba" / numba_dir), NUMBA_NUM_THREADS="1",
                   MPLBACKEND="Agg")
        return env


# ---------------------------------------------------------------------------------------------- running
@dataclass
class Run:
    rc: int | None               # None: timed out
    seconds: float
    output: str
    failed: list[str] = field(default_factory=list)


_SUMMARY = re.compile(r"^(FAILED|ERROR) (.+?)(?: - .*)?$", re.M)


def pytest_run(copy: Copy, args: list[str], timeout: float, numba_dir: str = "base", first: bool = True) -> Run:
    cmd = [sys.executable, "-m", "pytest", *(PYTEST if first else [a for a in PYTEST if a != "-x"]), *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=copy.repo, env=copy.env(numba_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)                          # the forked strategy children go with it
        out, _ = proc.communicate()
        rc = None
    return Run(rc, time.monotonic() - start, out or "", [m.group(2).strip() for m in _SUMMARY.finditer(out or "")])


def _with_deselect(args: list[str], red: list[str]) -> list[str]:
    return [*args, *(x for t in red for x in ("--deselect", t))]


def check_imports(copy: Copy):
    """Every package must be imported from the mirror, never from the editable install."""
    names = sorted(_package_dirs())
    code = ("import importlib, json\n"
            f"print(json.dumps({{n: importlib.import_module(n).__file__ for n in {names!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=copy.repo, env=copy.env(), capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise SystemExit(f"the copy does not import:\n{out.stderr[-3000:]}")
    files = json.loads(out.stdout.strip().splitlines()[-1])
    wrong = {n: f for n, f in files.items() if not Path(f).resolve().is_relative_to(copy.pkg.resolve())}
    if wrong:
        raise SystemExit(f"not imported from the copy: {wrong}")
    return files


def log(msg: str):
    print(msg, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="mutant ids (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants and check their sites, run nothing")
    ap.add_argument("--no-report", action="store_true", help="do not write reports/benchmarks/checker_mutation.*")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy")
    ap.add_argument("--timeout-factor", type=float, default=3.0)
    ap.add_argument("--render", action="store_true", help="write the .md again from the .json, run nothing")
    args = ap.parse_args(argv)
    if args.render:
        data = json.loads(REPORT.with_suffix(".json").read_text())
        write_report(data["summary"], data["mutants"])
        return 0
    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    if args.only and len(mutants) != len(args.only):
        raise SystemExit(f"unknown mutant ids: {sorted(set(args.only) - {m.id for m in MUTANTS})}")
    if len({m.id for m in MUTANTS}) != len(MUTANTS):
        raise SystemExit("mutant ids are not unique")

    if args.list:
        bad = 0
        for m in mutants:
            try:
                _, line = apply(m, (ROOT / m.file).read_text())
                where = f"{m.file}:{line}"
            except SiteError as exc:
                where, bad = f"STALE ({exc})", bad + 1
            log(f"{m.id:40} {where:36} {m.desc}")
        return 1 if bad else 0

    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="checker-mutation-"))
    try:
        log(f"copying {ROOT} to {tmp}")
        copy = Copy(tmp)
        files = check_imports(copy)
        log(f"control 1/3: every package imports from the copy ({files['vjpcert.core']})")

        results: list[dict] = []
        sites: dict[str, tuple[str, int]] = {}
        for m in mutants:
            try:
                sites[m.id] = apply(m, copy.source(m.file))
            except SiteError as exc:
                results.append({"id": m.id, "file": m.file, "line": None, "description": m.desc,
                                "status": "stale", "detail": str(exc), "seconds": 0.0})
                log(f"  stale: {m.id}: {exc}")

        def selection_of(m):
            return m.selection or FILE_SELECTION[m.file]
        used = sorted({selection_of(m) for m in mutants if m.id in sites})
        baseline: dict[str, dict] = {}
        for name in used:
            run = pytest_run(copy, SELECTIONS[name], 1800, first=False)     # every red test, in one pass
            red = list(run.failed)
            if run.rc not in (0, 1) or (run.rc == 1 and not red):
                raise SystemExit(f"selection {name} does not run on the unmutated copy (rc {run.rc}):\n"
                                 f"{run.output[-3000:]}")
            seconds = run.seconds
            passed = re.search(r"(\d+) passed", run.output)
            baseline[name] = {"seconds": round(seconds, 1), "red_on_unmutated": red,
                              "passed": int(passed.group(1)) if passed else 0,
                              "timeout": round(args.timeout_factor * seconds + 60)}
            log(f"control 2/3: selection {name}: {baseline[name]['passed']} tests green in {seconds:.0f} s"
                + (f"; red on the unmutated copy, deselected: {red}" if red else ""))

        for rel in sorted({m.file for m in mutants if m.id in sites}):
            name = FILE_SELECTION[rel]
            if name not in baseline:
                continue
            copy.write(rel, canary(copy.source(rel)))
            run = pytest_run(copy, _with_deselect(SELECTIONS[name], baseline[name]["red_on_unmutated"]),
                             baseline[name]["timeout"], numba_dir="canary")
            copy.restore(rel)
            # the selection is green on the unmutated copy, so a red run here is this file's canary at
            # work (its message may be wrapped: a checker that catches errors turns them into verdicts)
            if run.rc not in (1, 2, 3) and not (run.rc == 4 and CANARY in run.output):   # 4: at conftest import
                raise SystemExit(f"control 3/3 failed: a canary in {rel} did not reach selection {name} "
                                 f"(rc {run.rc}): the copy is not the code under test")
            log(f"control 3/3: the canary in {rel} fails selection {name}"
                + ("" if CANARY in run.output else f" ({run.failed[:1]}, the canary's message wrapped)"))

        for i, m in enumerate(mutants, 1):
            if m.id not in sites:
                continue
            text, line = sites[m.id]
            name = selection_of(m)
            base = baseline[name]
            numba_dir = m.id if "numba" in copy.source(m.file) else "base"
            copy.write(m.file, text)
            run = pytest_run(copy, _with_deselect(SELECTIONS[name], base["red_on_unmutated"]), base["timeout"],
                             numba_dir=numba_dir)
            copy.restore(m.file)
            entry = {"id": m.id, "file": m.file, "line": line, "description": m.desc, "selection": name,
                     "seconds": round(run.seconds, 1)}
            if run.rc is None:
                entry["status"] = "timeout"
            elif run.rc == 0:
                entry["status"] = "survived"
                if m.harmless:
                    entry["harmless"] = m.harmless
            elif run.rc in (1, 2, 3, 4):                  # 4: the session itself failed to start
                killer = run.failed[0] if run.failed else "(collection)" if run.rc != 4 else "(conftest import)"
                entry.update(status="killed", killed_by=killer)
                if run.failed:                            # the killing test must pass on the original
                    again = pytest_run(copy, [killer], base["timeout"])
                    if again.rc != 0:
                        entry.update(status="flaky", detail=f"{killer} fails on the unmutated copy too")
            else:
                entry.update(status="error", detail=run.output[-500:])
            results.append(entry)
            log(f"[{i}/{len(mutants)}] {entry['status']:8} {m.id} ({run.seconds:.0f} s)"
                + (f" by {entry['killed_by']}" if entry.get("killed_by") else ""))
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    order = {m.id: k for k, m in enumerate(MUTANTS)}
    results.sort(key=lambda r: order[r["id"]])
    summary = _summary(results)
    summary.update(seconds=round(time.time() - started), baseline=baseline,
                   command=COMMAND + (" --only " + " ".join(args.only) if args.only else ""))
    log(f"killed {summary['killed']} of {summary['counted']} ({summary['kill_ratio']:.0%}); "
        f"survived {summary['survived']} ({summary['survived_harmless']} harmless); "
        f"timeout {summary['timeout']}; stale {summary['stale']}; flaky {summary['flaky']}")
    if not args.no_report:
        write_report(summary, results)
    return 0


def _summary(results: list[dict]) -> dict:
    count = {s: sum(r["status"] == s for r in results) for s in ("killed", "survived", "timeout", "stale", "flaky", "error")}
    counted = count["killed"] + count["survived"] + count["timeout"]
    harmless = sum(r["status"] == "survived" and bool(r.get("harmless")) for r in results)
    return {**count, "counted": counted, "survived_harmless": harmless,
            "kill_ratio": count["killed"] / counted if counted else 0.0,
            "kill_ratio_non_equivalent": count["killed"] / (counted - harmless) if counted - harmless else 0.0}


def write_report(summary: dict, results: list[dict]):
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.with_suffix(".json").write_text(json.dumps({"summary": summary, "mutants": results}, indent=2) + "\n")
    s = summary
    lines = [
        "# Checker mutation run",
        "",
        "Small bugs injected into the checkers' own code, one at a time, in a copy of the repository "
        "(`benchmarks/checker_mutation.py`: each mutant's site, its description and, for a survivor, why it "
        "is harmless: equivalent, or only on the safe side). Each mutant runs a targeted test selection with `-x`; **killed** "
        "means a test went red (and passes again on the unmutated copy), **survived** that every selected "
        "test stayed green.",
        "",
        f"Regenerate: `{s['command']}`",
        "",
        f"- killed **{s['killed']} of {s['counted']}** ({s['kill_ratio']:.0%}); of the mutants not explained "
        f"as harmless, {s['kill_ratio_non_equivalent']:.0%}",
        f"- survived {s['survived']} ({s['survived_harmless']} with the reason they are harmless, below); "
        f"timeout {s['timeout']}; stale sites {s['stale']}; flaky {s['flaky']}; errors {s['error']}",
        f"- {s['seconds'] // 60} min in all",
        "",
        "Controls run first: every package imports from the copy; every selection is green on the "
        "unmutated copy (tests red there are deselected, listed below); a canary raising at the top of "
        "each mutated file fails its selection.",
        "",
        "| selection | tests | seconds | red on the unmutated copy (deselected) |",
        "|---|---|---|---|",
    ]
    for name, b in s["baseline"].items():
        lines.append(f"| {name} | {b['passed']} | {b['seconds']} | {', '.join(f'`{t}`' for t in b['red_on_unmutated']) or '-'} |")
    lines += ["", "| mutant | site | what | result | seconds |", "|---|---|---|---|---|"]
    for r in results:
        site = f"`{r['file']}:{r['line']}`" if r.get("line") else f"`{r['file']}`"
        if r["status"] == "killed":
            res = f"killed by `{r['killed_by']}`"
        elif r["status"] == "survived":
            res = "survived" + (f" (harmless: {r['harmless']})" if r.get("harmless") else " **(not explained)**")
        else:
            res = r["status"] + (f": {r['detail']}" if r.get("detail") and r["status"] != "error" else "")
        lines.append(f"| `{r['id']}` | {site} | {r['description']} | {res} | {r['seconds']} |")
    REPORT.with_suffix(".md").write_text("\n".join(lines) + "\n")
    log(f"wrote {REPORT.with_suffix('.md')} and .json")


if __name__ == "__main__":
    sys.exit(main())
