"""Every number the symbolic checker decides with, and where it comes from."""
from fractions import Fraction

# Witness search (mpmath). A `failed` verdict needs a residual that is far above rounding at LOW_DPS
# digits and persists when the same exact point is evaluated at HIGH_DPS digits.
LOW_DPS = 50
HIGH_DPS = 100
# Relative residual above which LOW_DPS arithmetic cannot explain it: rounding at 50 digits leaves
# ~1e-48 relative error after a few hundred operations; 1e-25 leaves 23 orders of margin either way
# (a bug one part in 1e7 is 18 orders above it).
FAIL_REL = 1e-25
# The residual at HIGH_DPS must agree with LOW_DPS to this relative accuracy: a genuine nonzero.
PERSIST_REL = 1e-10
# Digits of agreement at HIGH_DPS that count as "numerically zero" (rounding leaves ~95).
ZERO_DIGITS = 80
WITNESS_POINTS = 3
# Point k is drawn at scale WITNESS_SCALES[k % len]: [-2, 2], then [-20, 20], then [-0.2, 0.2]. A backward
# wrong only on a rarely sampled region (x < -3, say) looks right on [-2, 2]; the wider draw finds it.
WITNESS_SCALES = (1, 10, Fraction(1, 10))
# Sample inputs: integers in [-SPAN, SPAN] over DEN, never 0 (values in [-2, 2], exact rationals);
# positive parameters (eps) in [LO, HI] / DEN = [0.05, 1].
WITNESS_DEN = 1000
WITNESS_SPAN = 2000
WITNESS_POS_LO, WITNESS_POS_HI = 50, 1000
WITNESS_MAX_LEAVES = 200

# Exact witness: claims built from + - * / only are evaluated exactly at this many rational points.
# A nonzero polynomial vanishes at a random point of a large grid with probability <= degree / grid.
EXACT_WITNESS_POINTS = 3
CONSTANT_FIT_POINTS = 2          # points at which a failure is fitted by the constants' rounding
EXACT_WITNESS_POINTS_WIDE = 24      # when the relations step has shown the rational residual is nonzero
EXACT_TEXT_MAX_CHARS = 2000    # longer exact rationals are shown to 30 digits (the point stays exact)
# The backward on a kink (claim at_the_kink): exact points per differentiable input, inputs in
# {-1, 0, 1} so that many arguments of B.step are exactly 0 (symbolic.fixed.kinks)
KINK_POINTS = 6

# Randomised exact test over GF(p), a fresh random 63-bit prime per trial: independent trials, each
# a false pass with probability <= degree / p + (prime divides the coefficients) + (atoms collide);
# ``symbolic.fixed.false_pass.false_pass_bound``.
MODP_TRIALS = 3

# A shared intermediate that is a linear form with at least this many terms becomes an atom (with
# its linear relation) instead of being expanded at every use. Below ~16 terms expansion is cheaper.
LIN_ATOM_MIN_TERMS = 16
# Past this many terms (both sides, as SizeField bounds them) the exact ring is not tried: measured on
# 2 cores it expands ~100k terms a second and needs about 1 KB a term, so 2 million cost the ring's
# whole share of the default budget and then failed for memory (attention at m = d = 16: 2.2 million);
# the ladder goes straight to the randomised exact test (mod p), which decides such claims in seconds.
RING_MAX_TERMS = 1_500_000

# Share of the remaining claim budget each strategy may spend (the last one gets what is left).
SHARE = {"wiring": 0.5, "ring": 0.5, "exact-witness": 0.3, "witness": 0.5, "relations": 0.5, "sympy": 0.6, "modp": 0.7}
# SymPy's own derivation is only attempted on small claims (in traced nodes): beyond this it cannot
# finish within any sensible budget (measured: plain simplify took 16 s at softmax n=16).
SYMPY_MAX_NODES = 4000
DEFAULT_CLAIM_BUDGET_S = 60.0

# ------------------------------------------------------------------------------ every-size proofs (general.py)
GENERAL_LADDER = (1, 2, 3, 5)          # default cross-check sizes: 1 catches off-by-one ranges, 5 is not square
GENERAL_BATCH_LADDER = (1, 2)          # dims that only repeat rows (no coupling across them)
GENERAL_BATCH_DIMS = ("rows", "batch")
GENERAL_CROSS_CHECK_POINTS = 4         # how many concrete sizes the cross-check instantiates by default
GENERAL_CROSS_CHECK_MAX_SIZE = 9       # ... dropping those whose non-batch dims multiply to more than this
GENERAL_WITNESS_MAX_ENTRIES = 48       # entries of the cotangent evaluated when looking for a witness
GENERAL_SHARE = {"normalise": 0.5, "cross-check": 0.8, "witness": 0.7}
GENERAL_FIXED_DIMS_BUDGET_S = 10.0     # per size; measured here: 0.01-0.07 s each at the cross-check sizes
GENERAL_MIN_COMPARED = 3               # sizes at which the statement must be compared with the spec
GENERAL_MAX_ENUMERATED = 8             # a free index over a constant range of up to this many values is enumerated
# a witness residual is relative to max(|lhs|, |rhs|, this): entries that vanish are compared absolutely
GENERAL_SCALE_FLOOR = 1e-30

# A claim proved for every size, at dims outside the op's ladder, goes to its every-size proof first
# (symbolic/every_size/instance.py) when the ring's bound on its terms is at least this: below it the ring
# decides in well under a second (RMSNorm's vjp[x] at n = 128: 99k terms, 0.3 s), above it the
# relations cost seconds (LayerNorm's dx_orthogonal_to_xhat at n = 128: 164k, 7 s) and the every-size
# proof about 0.4 s at any size. INSTANCE_SHARE: its share of the claim's budget.
INSTANCE_MIN_RING_TERMS = 100_000
INSTANCE_SHARE = 0.5

# ------------------------------------------------------------------------------ modular (modular.py)
# The randomised exact test at production dims (the spec's numpy code mod a prime in [2^59, 2^60)):
# at least MODULAR_TRIALS trials per (op, dims), each at a fresh prime and point, and more, up to
# MODULAR_MAX_TRIALS, until the stated false-pass probability is below MODULAR_MAX_FALSE_PASS; a
# claim whose bound stays at or above it is `inconclusive` (however often its residual vanished).
# A per-trial bound at or above MODULAR_VACUOUS states nothing: no more trials are run.
MODULAR_TRIALS = 3
MODULAR_MAX_TRIALS = 32
MODULAR_MAX_FALSE_PASS = 1e-6
MODULAR_VACUOUS = 0.99
# A nonzero VJP residual of an op with atoms (exp, erf, sqrt, ...) is no disproof by itself: independent
# atoms break identities such as exp(a + b) = exp(a) exp(b). It is `failed` only when mpmath confirms it
# at the same point (symbolic/modular/confirm.py): <backward_X, t> against <dy, J t> by central
# differences at step 10^(-dps/3), at CONFIRM_LOW_DPS and CONFIRM_HIGH_DPS digits, the relative residual
# above CONFIRM_FAIL_REL at LOW (rounding and truncation leave ~1e-33 there) and the same to
# CONFIRM_PERSIST_REL at HIGH (where they leave ~1e-66). Within CONFIRM_BUDGET_S, else inconclusive.
CONFIRM_LOW_DPS = 50
CONFIRM_HIGH_DPS = 100
CONFIRM_FAIL_REL = 1e-20
CONFIRM_PERSIST_REL = 1e-10
CONFIRM_BUDGET_S = 60.0
# float64's own residual at this step is recorded beside the verdict (information only)
FLOAT64_CONFIRM_STEP = 1e-5
