"""The mutants of the checker mutation run (benchmarks/checker_mutation.py runs them): each a small bug
at one site of a checker's code, found in the file's AST by scope and node source, with the test
selection that must kill it and, for a survivor, why it is harmless. Files are named by their path in
the repository; ``FILE_SELECTION`` says which selection a file's mutants run unless one overrides it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

# ---------------------------------------------------------------------------------------------- selections
# name -> (pytest arguments: files, node ids, -k); each run with -x and a timeout of 3x its baseline + 60 s
M = "tests/test_checker_mutants.py::"
SELECTIONS: dict[str, list[str]] = {
    "symbolic": [M + "test_a_claim_decidable_only_numerically_off_by_1e_45_is_never_checked",
                 M + "test_with_the_exact_rungs_out_of_reach_1e_45_is_never_checked",
                 M + "test_with_the_exact_rungs_out_of_reach_1e_10_off_is_failed_by_the_witness",
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
    "constants": ["tests/test_constant_rounding.py"],
}
FILE_SELECTION = {
    "symbolic/settings.py": "symbolic", "symbolic/fixed/strategies.py": "symbolic", "symbolic/fixed/prover.py": "symbolic",
    "symbolic/fixed/fields.py": "symbolic", "symbolic/fixed/false_pass.py": "symbolic",
    "symbolic/fixed/modp_field.py": "symbolic", "frontends/constants.py": "frontend",
    "symbolic/modular/arith.py": "modarith", "symbolic/modular/kernels.py": "modarith",
    "symbolic/modular/bound.py": "modular", "symbolic/modular/check.py": "modular",
    "numeric/check.py": "numeric", "numeric/settings.py": "numeric",
    "core/rounding.py": "rounding", "core/tolerance.py": "tolerance",
    "symbolic/composition/wiring.py": "wiring", "symbolic/composition/algebra.py": "wiring",
    "frontends/torch_rules.py": "frontend", "frontends/values.py": "frontend",
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
                    "the same claims, and the wide exact search has run before the digits: only its second try "
                    "is lost (where the first did not finish), so `failed` may become `inconclusive`, never the "
                    "reverse"),
    Mutant("prover-unknown-is-zero", "symbolic/fixed/prover.py", "prove_claim", 'w["status"] == "zero"',
           ("value", "w['status'] in ('zero', 'unknown')"),
           "an undecided witness counts as numerically zero: `checked`", nth=1),
    # -- the fields and the ladder's false-pass bound (symbolic/fixed/fields.py, symbolic/fixed/false_pass.py)
    Mutant("fields-odd-sign-swapped", "symbolic/fixed/fields.py", "RingField._normalise_sign",
           "-1 if kind in self.ODD else 1", ("value", "1 if kind in self.ODD else -1"),
           "erf, tanh and sin are treated as even and cos as odd"),
    Mutant("fields-sqrt-any-square", "symbolic/fixed/fields.py", "RingField.sqrt", "e and var in self.nonneg",
           ("drop", "right"), "sqrt(v^2) = v for any variable, not only those known >= 0"),
    Mutant("fields-pythagoras-wrong", "symbolic/fixed/fields.py", "RingField.relations", "self.one - c * c",
           ("value", "self.one + c * c"), "the relation sin^2 = 1 + cos^2 instead of 1 - cos^2"),
    Mutant("fields-ring-bound-degree-max", "symbolic/fixed/false_pass.py", "BoundField.mul", "a[0] + b[0]",
           ("call2", "max"), "the degree bound of a product is the larger degree, not the sum"),
    Mutant("fields-bound-carry-dropped", "symbolic/fixed/false_pass.py", "BoundField.add",
           "hi + math.log2(1 + 2.0 ** (lo - hi))", ("drop", "right"),
           "the coefficient bound of a sum forgets the carry (|a + b|_1 <= |a|_1 + |b|_1)"),
    Mutant("fields-sz-term-dropped", "symbolic/fixed/false_pass.py", "false_pass_bound",
           "deg / p_min + max(bits, 1.0) / log2p * per_prime", ("drop", "left"),
           "the ladder's false-pass bound drops the Schwartz-Zippel term deg / p"),
    Mutant("fields-trials-squared", "symbolic/fixed/false_pass.py", "false_pass_bound", "min(1.0, eps) ** trials",
           ("value", "min(1.0, eps) ** (2 * trials)"), "the false-pass bound counts every trial twice"),
    Mutant("fields-prime-even", "symbolic/fixed/false_pass.py", "random_prime",
           "rng.randrange(2 ** (PRIME_BITS - 1), 2 ** PRIME_BITS) | 1", ("drop", "right"),
           "candidates for the random prime are not made odd",
           harmless="BPSW rejects every even candidate, so only the number of draws changes, never the prime "
                    "nor its distribution"),
    Mutant("fields-modp-fold-ge", "symbolic/fixed/modp_field.py", "ModPField._odd_even", "a > self.p // 2",
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
    Mutant("bound-sum-distinct-once", "symbolic/modular/bound.py", "products", "count * deg", ("drop", "left"),
           "a sum meets each varying denominator once, not once per distinct factor"),
    Mutant("bound-merge-dominance-blind", "symbolic/modular/bound.py", "_merge",
           "((a.e[i] >= b.e) & (a.deg[i] >= b.deg) & (a.bits[i] >= b.bits)).all()", ("value", "True"),
           "a group whose sources are all in the other is taken as counted, its larger exponents ignored"),
    Mutant("bound-merge-new-sources-dropped", "symbolic/modular/bound.py", "_merge", "new.any()",
           ("value", "False"), "a merge keeps the larger group's sources only, the other's new ones lost"),
    Mutant("bound-merge-product-exponent-max", "symbolic/modular/bound.py", "_merge", "a.e[i] + b.e[j]",
           ("value", "np.maximum(a.e[i], b.e[j])"),
           "a product's factor met in both operands keeps the larger exponent, not their sum"),
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
    # -- the ATen rules (frontends/torch_rules.py, frontends/values.py)
    Mutant("aten-rsub-swapped", "frontends/torch_rules.py", "_rsub", 'c.binary("-", y, c.binary("*", x, alpha))',
           ("value", 'c.binary("-", c.binary("*", x, alpha), y)'), "aten.rsub(x, y) read as alpha x - y"),
    Mutant("aten-addmm-beta-dropped", "frontends/torch_rules.py", "_addmm", "beta != 1", ("value", "False"),
           "aten.addmm ignores beta"),
    Mutant("aten-var-no-correction", "frontends/torch_rules.py", "_prims_var", "count - correction",
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
    Mutant("values-named-constant-any", "frontends/constants.py", "recognise", "off <= CONSTANT_ROUNDING_ULPS",
           ("value", "True"), "a float is read as the simplest named constant whose rational is small, however far"),
    Mutant("tol-fit-any-shift", "core/tolerance.py", "rounding_fit",
           "np.all(np.abs(shifts) <= CONSTANT_ROUNDING_ULPS)", ("value", "True"),
           "a failure is called constant rounding however far the constants must move", selection="constants"),
    Mutant("tol-fit-anything-left", "core/tolerance.py", "rounding_fit", "left <= FIT_LEFT", ("value", "True"),
           "a failure is called constant rounding whatever the fit leaves standing", selection="constants"),
]
