"""Attention as PyTorch's ``scaled_dot_product_attention`` exposes it: queries and keys of different
lengths (cross-attention), an explicit scale, causal masks aligned top-left or bottom-right, and a
key-padding mask. One head; Q is mq x d, K is mk x d, V is mk x dv.

    S = c Q K^T,  c = scale / sqrt(d),  P = masked rowsoftmax(S),  O = P V
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = c dS K,  dK = c dS^T Q

``scale`` is a symbolic parameter: every proof holds for every real value of it. It multiplies
PyTorch's default 1/sqrt(d), so scale = 1 (the default, what numeric checks and kernels use) *is*
PyTorch's default, and PyTorch's ``scale=s`` is scale = s sqrt(d) here.

Masks are built from shapes and structural parameters only (never from values), and masked logits are
*excluded* from the softmax, not set to a large negative number: an entry outside the mask contributes
exactly 0 to Z, which is what PyTorch's additive -inf mask gives (exp(-inf) = 0), without an infinity
anywhere. A row with no visible key outputs 0 and passes no gradient (PyTorch's math backend gives NaN
there; flash attention gives 0).
- ``sdpa_causal``: top-left, PyTorch's ``is_causal=True``: query i sees keys j <= i.
- ``sdpa_causal_bottom_right``: the last query sees the last key, as when decoding with a KV cache
  (the mq new queries are the last mq positions of the mk keys): query i sees keys j <= i + (mk - mq).
  With mq = mk the two alignments coincide; a dims ladder with mq != mk tells them apart.
- ``sdpa``: no causal mask, with a key-padding mask: the first ``pad`` keys are padding (a left-padded
  batch, as in batched decoding), excluded for every query. ``pad`` is a structural parameter (an int),
  so the mask is built from shapes and the every-size trace sees it as an indicator [j >= pad].
"""
import numpy as np

from vjpcert.core.registry import Param, op

SHAPES = dict(inputs={"Q": ("mq", "d"), "K": ("mk", "d"), "V": ("mk", "dv")}, output=("mq", "dv"),
              dims=[{"mq": 3, "mk": 2, "d": 1, "dv": 1}, {"mq": 2, "mk": 3, "d": 2, "dv": 2}],
              large_dims=[{"mq": 5, "mk": 8, "d": 4, "dv": 3}],
              check_dims={"mq": 3, "mk": 5, "d": 3, "dv": 2})
SCALE = Param(1, symbolic=True, doc="logits are scale * Q K^T / sqrt(d): 1 is PyTorch's default scale; "
                                    "proofs hold for every real scale")


# ------------------------------------------------------------------ shared with gqa (any leading axes)
def visible(mq, mk, causal: str | None = None, pad: int = 0):
    """The (mq, mk) mask of the keys each query sees, from the lengths and structural params only."""
    mask = np.ones((mq, mk), dtype=bool)
    if causal == "top_left":
        mask = np.tril(mask)                      # j <= i
    elif causal == "bottom_right":
        mask = np.tril(mask, k=mk - mq)           # j <= i + (mk - mq)
    elif causal is not None:
        raise ValueError(f"causal alignment {causal!r}: 'top_left' or 'bottom_right'")
    if pad:
        mask = mask & np.triu(np.ones((1, mk), dtype=bool), k=pad)     # j >= pad, for every query
    return mask


def keys_t(K):
    """K with its last two axes swapped (K^T for one head, per head for more)."""
    return K.transpose(*range(K.ndim - 2), K.ndim - 1, K.ndim - 2)


def coefficient(B, d, scale):
    return scale / B.sqrt(B.c(d))


def masked_softmax(B, S, mask):
    """Row softmax over the entries the mask keeps; a row it keeps nothing of gives 0 (not NaN)."""
    e = np.where(mask, B.exp(S - B.max_shift(S, mask)), B.c(0))    # shift: 0 exactly, row max in floats
    Z = e.sum(-1, keepdims=True)
    return e / np.where(mask.any(-1, keepdims=True), Z, B.c(1))


def probabilities(B, Q, K, scale, mask):
    return masked_softmax(B, coefficient(B, Q.shape[-1], scale) * (Q @ keys_t(K)), mask)


def attend(B, Q, K, V, scale, mask):
    return probabilities(B, Q, K, scale, mask) @ V


def attend_vjp(B, Q, K, V, scale, mask, dy):
    """(dQ, dK, dV) per head: K and V broadcast against Q's leading axes, nothing summed here."""
    c = coefficient(B, Q.shape[-1], scale)
    P = probabilities(B, Q, K, scale, mask)
    dP = dy @ keys_t(V)
    dS = P * (dP - (P * dP).sum(-1, keepdims=True))
    return c * (dS @ K), c * (keys_t(dS) @ Q), keys_t(P) @ dy


# ------------------------------------------------------------------ the ops
@op(**SHAPES, params={"scale": SCALE, "pad": Param(1, symbolic=False, doc="the first pad keys are padding")})
def sdpa(B, Q, K, V, scale, pad):
    return attend(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], pad=pad))


@sdpa.defvjp
def sdpa_vjp(B, Q, K, V, scale, pad, dy):
    return attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], pad=pad), dy)


@op(**SHAPES, params={"scale": SCALE})
def sdpa_causal(B, Q, K, V, scale):
    return attend(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "top_left"))


@sdpa_causal.defvjp
def sdpa_causal_vjp(B, Q, K, V, scale, dy):
    return attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "top_left"), dy)


@op(**SHAPES, params={"scale": SCALE})
def sdpa_causal_bottom_right(B, Q, K, V, scale):
    return attend(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "bottom_right"))


@sdpa_causal_bottom_right.defvjp
def sdpa_causal_bottom_right_vjp(B, Q, K, V, scale, dy):
    return attend_vjp(B, Q, K, V, scale, visible(Q.shape[0], K.shape[0], "bottom_right"), dy)


# ------------------------------------------------------------------ laws
@sdpa.law
def padded_keys_are_inert(B, Q, K, V, dy, backward):
    """The padded key (key 0 at pad = 1) gets no cotangent: dK[0] = dV[0] = 0."""
    _, dK, dV = backward(Q, K, V, dy)
    return np.concatenate([dK[0], dV[0]])


@sdpa_causal.law
def first_query_sees_only_the_first_key(B, Q, K, V, forward):
    """Top-left: query 0 sees key 0 only, so O[0] = V[0], whatever mk is."""
    return forward(Q, K, V)[0], V[0]


@sdpa_causal_bottom_right.law
def last_query_sees_every_key(B, Q, K, V, scale, forward):
    """Bottom-right: the last query (the newest token) sees all mk keys: plain attention."""
    full = np.ones((1, K.shape[0]), dtype=bool)
    return forward(Q, K, V)[-1:], attend(B, Q[-1:], K, V, scale, full)


def _dv_rows_follow_p(mask_of):
    def law(B, Q, K, V, dy, backward):
        """sum_j dV[j, :] = sum of dO[i, :] over the queries that see a key: P's rows sum to 1, or are 0."""
        _, _, dV = backward(Q, K, V, dy)
        sees = mask_of(Q.shape[0], K.shape[0]).any(-1, keepdims=True)
        return dV.sum(0), np.where(sees, dy, B.c(0)).sum(0)
    return law


sdpa.law(_dv_rows_follow_p(lambda mq, mk: visible(mq, mk, pad=1)), name="dV_rows_follow_P")
sdpa_causal.law(_dv_rows_follow_p(lambda mq, mk: visible(mq, mk, "top_left")), name="dV_rows_follow_P")
sdpa_causal_bottom_right.law(_dv_rows_follow_p(lambda mq, mk: visible(mq, mk, "bottom_right")),
                             name="dV_rows_follow_P")

# Proved for every mq, mk, d and dv where the every-size normaliser decides the masks: the statements are
# derived from the code above (symbolic.every_size.shape_trace), the masks becoming indicators [j <= i],
# [j <= i + mk - mq], [j >= pad]. Top-left causal: every claim but dV_rows_follow_P. Bottom-right: dV and
# its law; its dQ/dK (the fully-masked-row guard becomes [i + mk - mq >= 0]) and the padded dQ/dK/dV
# (the delta sums meet [j >= 1]) leave a normal form the normaliser does not reduce (`inconclusive`,
# never `proved`): those are proved exactly at the dims of the ladder, mq != mk both ways.
sdpa.every_size("padded_keys_are_inert")
sdpa_causal.every_size("vjp[Q]", "vjp[K]", "vjp[V]", "first_query_sees_only_the_first_key")
sdpa_causal_bottom_right.every_size("vjp[V]", "last_query_sees_every_key")
