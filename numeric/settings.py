"""Every number the numeric checker decides with, and where it comes from."""
from fractions import Fraction

DEFAULT_DPS = 50
# Guard digits: evaluations run at dps + GUARD_DIGITS and report at most dps digits. Where a derivative
# is far smaller than the function (attention over near-constant rows: |J| ~ 1e-13 |f|), finite
# differences lose log10(|f| / |f'| |x|) digits; measured here up to 19 (a ViT block's dWq), so 20
# guard digits leave every claim its full dps digits.
GUARD_DIGITS = 20
# The conditioning allowance (digits a derivative cannot have at a point, from the forward's own
# derivative) never exceeds the guard digits: with them, every claim keeps its dps digits anyway.
MAX_CONDITIONING_LOSS = GUARD_DIGITS
MIN_DPS = 20           # below this a 40-digit claim cannot even be stated; refuse rather than mislead
# Digits each derivative method delivers, as a fraction of the working digits. Measured here on
# attention m=d=4 at 50 digits: central difference 34, Richardson 40, mpmath.diff 51,
# complex step 50.5; we require these fractions minus MARGIN, so noise never fails a correct backward.
METHOD_FRACTION = {"central": 0.62, "richardson": 0.78, "mpmath-diff": 0.95, "complex-step": 0.95}
MARGIN_DIGITS = 6
LAW_MARGIN_DIGITS = 10  # laws are evaluated directly (no derivative): only rounding eats digits
# A shortfall is a failure only if it persists when the same point is redone at CONFIRM x digits:
# rounding and truncation shrink with precision, a wrong backward does not (it may gain <= 1 digit).
CONFIRM_FACTOR = 2
PERSIST_GAIN = 1.0

FULL_JACOBIAN_MAX = 16      # input and output entries at most this: compare the full Jacobian
DIRECTIONS = 3              # otherwise: this many random (u, v) pairs, <J u, v> against <u, J^T v>
WITNESS_COMPONENTS_MAX = 64

# Input cases, defined once for both numeric tiers in core/input_cases.py: random signed normals;
# large magnitudes (softmax logits ~ +-30: exp ranges over 1e26); near-constant rows (softmax
# near-ties, norms with a variance ~ 1e-12, far below eps). The kernel tier also runs the large
# offset and mixed magnitude cases there, which target float32 overflow and cancellation.
CASES = ("random", "large_magnitude", "near_constant")
from vjpcert.core.input_cases import LARGE_SCALE  # noqa: E402  (the large-magnitude scale; also free shifts')
# ... plus, for ops with symbolic parameters, a random point with every such parameter at this many
# times its default (a value no default can coincide with by accident).
OTHER_PARAM_FACTOR = Fraction(37, 11)

# A derivative below 10^(ZERO_GRADIENT_DIGITS - dps) of its natural size |y|/|x| is numerically 0
# (an exactly zero gradient such as a key bias's): agreement is then measured against |y|/|x|.
ZERO_GRADIENT_DIGITS = 10

KINK_MIN_DISTANCE = 1e-3    # sampled points stay this far from a declared kink
# A VJP below this fraction of |dy| * |inputs| proves little about the backward: say so.
TINY_VJP = 1e-10
LONG_ROW = 1025             # crosses 1024: the row length of the "long rows" dims
LONG_ROW_MAX_ENTRIES = 8 * LONG_ROW   # skip the long-row dims where they would make every input long
LONG_LENGTH = 1025          # a recurrence's long dims: backpropagation through more than 1024 steps

# ------------------------------------------------------------------ the `reference` claim (numeric/reference.py)
# The mpmath backend's run of a spec must agree with the traced spec (evaluated at the same digits) to
# dps - this many digits: the two differ only by rounding in the last few guard digits.
MPMATH_MARGIN_DIGITS = 10
# The float path against the exact function: the rule and its constants are core's (core.tolerance,
# core.rounding.float_path_errors), shared with the replay of every traced claim (core.replay).
from vjpcert.core.tolerance import (BOUND_SLACK, REFERENCE_FLOOR_ROUNDINGS,  # noqa: E402,F401
                                    REFERENCE_FLOOR_SHARE_FOR_BOUND)
WITNESS_POINT_MAX_ENTRIES = 256   # a failed reference certificate carries the point if it is this small

# Finite-difference steps are relative to the smallest spread of a row of x (a near-constant row sets
# the step), clipped to [FD_SCALE_MIN, 1]: below 1e-12 a step would be lost in the inputs' own digits.
FD_SCALE_MIN = 1e-12

# A cotangent is redrawn until its entries spread by more than this (an all-ones dy makes softmax's
# correct VJP identically 0, so a wrong one would pass too).
COTANGENT_MIN_SPREAD = 1e-3
