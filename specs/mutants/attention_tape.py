"""Wrong tapes: a node whose VJP is wrong, and a backprop that forgets to sum fan-out."""
import numpy as np

from vjpcert.specs.attention_tape import SCALE, attention_tape, graph


@attention_tape.mutant("fan_out_overwritten", kills=["vjp[Q]"])
def _(B, Q, K, V, dy):
    """Q feeds two nodes (L and the scale's width); a backprop that overwrites instead of summing
    keeps only the last contribution (here: the scale's zero) and loses dQ."""
    tape = graph.eval(B, {"Q": Q, "K": K, "V": V})
    seeds, at = {}, 0
    for k in graph.order:
        size = int(np.prod(np.shape(tape[k])))
        seeds[k] = np.reshape(dy[at:at + size], np.shape(tape[k]))
        at += size
    cot = {k: seeds[k] for k in graph.order}
    for name, prim, args in reversed(graph.nodes):
        for a, c in zip(args, prim.vjp(B, *(tape[x] for x in args), cot[name])):
            cot[a] = c if a == "Q" else cot[a] + c
    return cot["Q"], cot["K"], cot["V"]


@attention_tape.mutant("seeds_on_intermediates_dropped", kills=["vjp[Q]", "vjp[K]", "vjp[V]"])
def _(B, Q, K, V, dy):
    """Seeds only on the output O: right for the usual loss, wrong for the theorem's every-seed claim."""
    tape = graph.eval(B, {"Q": Q, "K": K, "V": V})
    size = int(np.prod(np.shape(tape["O"])))
    cot = graph.backprop(B, tape, {"O": np.reshape(dy[-size:], np.shape(tape["O"]))})
    return tuple(cot[k] if cot[k] is not None else B.zeros(np.shape(tape[k])) for k in ("Q", "K", "V"))


@attention_tape.mutant("tape_scaled_twice", replaces="forward",
                       kills=["vjp[Q]", "vjp[K]", "vjp[V]", "tape_ends_in_attention"])
def _(B, Q, K, V):
    tape = graph.eval(B, {"Q": Q, "K": K, "V": V})
    tape["S"] = SCALE.forward(B, tape["S"], Q)
    from vjpcert.specs.softmax import softmax
    tape["P"] = softmax(B, tape["S"])
    tape["O"] = tape["P"] @ V
    return np.concatenate([np.ravel(tape[k])
                           for k in graph.order])


@attention_tape.mutant("softmax_node_unshifted_denominator", replaces="forward", kills=["max_shift_free"])
def _(B, Q, K, V):
    """The tape with a row softmax that subtracts the row maximum in the numerator only."""
    tape = graph.eval(B, {"Q": Q, "K": K, "V": V})
    S = tape["S"]
    tape["P"] = B.exp(S - B.max_shift(S)) / B.exp(S).sum(-1, keepdims=True)
    tape["O"] = tape["P"] @ V
    return np.concatenate([np.ravel(tape[k]) for k in graph.order])
