"""Every length at once: a recurrence's VJP claims by induction on its length (``core.recurrence``).

The op is h_t = cell(h_(t-1), x_t, s) for t = 1..T (x the sequences, s the shared inputs), its output
(h_1, ..., h_T), its backward ``core.recurrence.bptt``: the cell's own hand-written backward from t = T
down to 1, the carry's cotangent at each step dy_t plus what the later steps sent back. Its claim
vjp[v] (v the initial carry, a sequence or a shared input) holds for every T >= 1 when the cell's
vjp[carry] and vjp[v] hold:

  * T = 1: the recurrence is the cell and bptt one call of the cell's backward: the cell's vjp[v].
  * T -> T + 1: the forward is the cell at t = 1, then the recurrence of length T started from h_1 on
    x_2 .. x_(T+1). bptt runs the length-T backward first -- by the hypothesis the transpose of that
    rest's Jacobian, the cotangent sent back to h_1 included -- then the cell's backward at t = 1 with
    dy_1 plus that cotangent, which by the cell's claims is the transpose of the cell's Jacobian; the
    chain rule composes the two, and a shared input's cotangents add up as its uses do.

With a readout (y_t = readout(h_t, x_t, s), the output (y_1, ..., y_T)), each step's backward is the
readout's on dy_t, then the cell's on the state's two cotangents (the readout's and the later steps'):
the claim then needs the readout's vjp[carry] and vjp[v] (where it reads v) too, and the chain rule
composes three Jacobians per step instead of two.

So the claim rests on the step ops' claims, proved here for every size of the cell's dims by the
every-size tier, and on bptt being that reverse loop: the library's code, not the spec's. An op whose
forward or backward is not the recurrence's own any more (a mutant, a hand-written backward) is
refused, never proved. The loop is also checked against the definition, unrolled: the recurrence's
claim at T = 1 and 2 must be proved by the fixed-dims ring and at T = 3 not refuted (``instance_dims``);
a refutation is a witness.
"""
from __future__ import annotations

import time

from vjpcert.core.certificate import Certificate
from vjpcert.core.registry import Op
from vjpcert.symbolic.every_size.dims import general_dims
from vjpcert.symbolic.fixed.prover import prove_claim

INDUCTION = ("For every length {T} >= 1: by induction on {T}. {T} = 1: the recurrence is the cell {cell}, "
             "and its backward one call of the cell's backward, so the claim is the cell's. "
             "{T} -> {T} + 1: the forward is the cell at t = 1, then the recurrence of length {T} from h_1; "
             "the backward (core.recurrence.bptt) runs the length-{T} backward first (the hypothesis: the "
             "transpose of the rest's Jacobian, the cotangent sent back to h_1 included), then the cell's "
             "backward at t = 1 on dy_1 plus that cotangent, which is the transpose of the cell's Jacobian by "
             "{claims}; the chain rule composes them, and a shared input's cotangents add up "
             "as its uses do.")
INDUCTION_WITH_READOUT = (
    "For every length {T} >= 1: by induction on {T}. {T} = 1: the recurrence is the readout {readout} of the "
    "cell {cell}, and its backward the readout's backward, then the cell's on the state's cotangent: the chain "
    "rule of the two Jacobians. {T} -> {T} + 1: the forward is the cell and the readout at t = 1, then the "
    "recurrence of length {T} from h_1; the backward (core.recurrence.bptt) runs the length-{T} backward first "
    "(the hypothesis: the transpose of the rest's Jacobian, the cotangent sent back to h_1 included), then the "
    "readout's backward at t = 1 on dy_1, then the cell's on the sum of the state's two cotangents, each the "
    "transpose of its Jacobian by {claims}; the chain rule composes them, and an input read at several places "
    "(a shared input, a sequence both steps read) gets the sum of its cotangents as its uses add up.")


def instance_dims(op: Op) -> list[dict]:
    """Where the loop is checked against the definition, unrolled: T = 1 (the base) and T = 2 (the first
    step), which the ring must prove, and T = 3, which must not be refuted (the ring may hand it to mod
    p), at the op's smallest widths."""
    length = op.recurrence.length
    return [{**op.dims[0], length: t} for t in (1, 2, 3)]


class _Induction:
    """One claim proved by induction (on a recurrence's length or on its chunks): the evidence it
    gathers, its deadline, the premises it proves for every size, the unrolled instances it checks the
    loop with, and the certificate it ends in."""

    def __init__(self, op: Op, claim: str, budget: float, seed: int, certificate, evidence: dict, instances):
        self.op, self.claim, self.seed, self.certificate = op, claim, seed, certificate
        self.start = time.perf_counter()
        self.dims = general_dims(op, claim)
        self.evidence = evidence
        self.instance_dims = instances
        self.deadline = time.monotonic() + budget

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def done(self, verdict, assumptions=(), **extra) -> Certificate:
        self.evidence.update(extra)
        self.evidence["seconds_total"] = round(time.perf_counter() - self.start, 3)
        return self.certificate(verdict, self.dims, list(assumptions), self.evidence)

    def refuted(self, instances: list):
        """The first instance the ring refutes: a witness against the claim for every size."""
        for d in self.instance_dims:
            cert = prove_claim(self.op, self.claim, d, budget=max(1.0, self.left() / 3), seed=self.seed)
            instances.append({"dims": d, "verdict": cert.verdict, "method": cert.method})
            if cert.verdict == "failed":
                return d, cert.evidence.get("witness")
        return None

    def not_own(self, why: str, over: str) -> Certificate:
        """An op whose forward or backward is not the construct's own: no induction holds for it, but a
        refutation at fixed dims still refutes every size."""
        instances: list = []
        found = self.refuted(instances)
        if found is not None:
            return self.done("failed", witness=found[1], instances=instances,
                             reason=f"{why}, and its {self.claim} is refuted at {found[0]} by the fixed-dims ring")
        return self.done("inconclusive", instances=instances,
                         reason=f"refused: {why}, so no induction on {over} holds for it")

    def undeclared(self, needed, whose: str) -> Certificate | None:
        missing = [f"{o.name}: {c}" for o, c in needed if c not in o.general]
        if missing:
            return self.done("inconclusive", reason=f"the {whose} do not declare {missing} for every size "
                                                    f"(op.every_size(...)): the induction needs them")
        return None

    def premises(self, needed, prove_general) -> dict:
        """Each premise proved for every size, the time left shared among those still to come."""
        proved = {}
        for k, (o, c) in enumerate(needed):
            cert = prove_general(o, c, budget=max(1.0, self.left() / (len(needed) - k + 1)), seed=self.seed)
            proved[(o, c)] = {"verdict": cert.verdict, "statement_dims": cert.dims,
                              "assumptions": list(cert.assumptions),
                              **({"reason": cert.evidence.get("reason")} if cert.verdict != "proved-general" else {})}
        return proved

    def unproved(self, proved: dict, what: str, unrolled: str) -> Certificate | None:
        """The loop against the definition, unrolled (a refutation is a witness), then every premise
        proved for every size and the first two instances proved; None when all of that holds."""
        instances: list = []
        found = self.refuted(instances)
        if found is not None:
            return self.done("failed", witness=found[1], instances=instances,
                             reason=f"{what}'s {self.claim} is refuted at {found[0]} by the fixed-dims ring")
        self.evidence["instances"] = instances
        not_proved = [k for k, r in proved.items() if r["verdict"] != "proved-general"]
        if not_proved:
            return self.done("inconclusive", reason=f"{[f'{o.name}: {c}' for o, c in not_proved]} not proved for "
                                                    f"every size: {[proved[k].get('reason') for k in not_proved]}"[:500])
        if any(i["verdict"] != "proved" for i in instances[:2]):
            return self.done("inconclusive", reason=unrolled)
        return None


def prove_by_induction(op: Op, claim: str, budget: float, seed: int, certificate, prove_general) -> Certificate:
    """``certificate(verdict, dims, assumptions, evidence)`` issues the every-size tier's certificate;
    ``prove_general(op, claim, budget=, seed=)`` proves the cell's claims."""
    rec = op.recurrence
    run = _Induction(op, claim, budget, seed, certificate,
                     {"proof": "induction on the length", "length": rec.length, "cell": rec.cell.name},
                     instance_dims(op))
    if not rec.intact(op):
        return run.not_own("the op's forward or backward is not the recurrence's own (core.recurrence: the cell "
                           "scanned, backpropagation through time over its backward)", "the length")
    if not claim.startswith("vjp["):
        return run.done("inconclusive", reason=f"refused: {claim!r} is not a VJP claim; only those follow from "
                                               f"the cell's by induction")
    # each step op's VJP of the carry (the state's cotangent flows through it) and of v where it reads v
    needed = [(o, c) for o in rec.steps for c in dict.fromkeys([f"vjp[{rec.carry}]", claim]) if c[4:-1] in o.inputs]
    refused = run.undeclared(needed, "step ops")
    if refused is not None:
        return refused
    proved = run.premises(needed, prove_general)
    run.evidence["cell_claims"] = {c: r for (o, c), r in proved.items() if o is rec.cell}
    if rec.readout is not None:
        run.evidence["readout"] = rec.readout.name
        run.evidence["readout_claims"] = {c: r for (o, c), r in proved.items() if o is rec.readout}
    short = run.unproved(proved, "the recurrence", "the recurrence is not proved unrolled at T = 1 and 2: the "
                                                   "backward loop is not checked against the definition")
    if short is not None:
        return short
    assumptions = sorted({a for r in proved.values() for a in r["assumptions"]} | {f"{rec.length} >= 1"})
    claims = " and ".join(f"{o.name}'s {c}" for o, c in needed)
    template = INDUCTION if rec.readout is None else INDUCTION_WITH_READOUT
    return run.done("proved-general", assumptions,
                    statement=template.format(T=rec.length, cell=rec.cell.name,
                                              readout=getattr(rec.readout, "name", ""), claims=claims),
                    variable=claim[4:-1])


# ------------------------------------------------------------------------------ a recurrence in chunks
CHUNKED_FORWARD = (
    "For every length {T} >= 1 and chunk size C >= 1: the chunked forward is {rec}'s. First, by induction on "
    "the chunk's length {n}: {state} over {n} steps is {n} steps of the cell {cell} from the state before the "
    "chunk ({state}'s laws one_step_is_the_cell and one_more_step_is_the_cell, for every {n} and width), and "
    "{out} over {n} steps is the recurrence's {n} outputs from that state ({out}'s laws one_step_is_the_readout "
    "and one_more_step_is_the_readout, which read the state after {n} steps through {state}). Then, by "
    "induction on the number of chunks: one chunk (T <= C, partial or whole) is {out} and {state} over T steps, "
    "so the recurrence; K + 1 chunks are a chunk of C steps, which is the recurrence's first C steps and the "
    "state after them, followed by K chunks from that state, which by the hypothesis are the recurrence from "
    "it over the rest (core.chunked.run_chunks cuts the chunks and carries the state; core.recurrence.scan "
    "is the recurrence's loop).")
CHUNKED_BACKWARD = (
    "For every length {T} >= 1 and chunk size C >= 1: by induction on the number of chunks. One chunk: the "
    "forward is {out} on it and the backward {out}'s backward (the state after it is no output), so the claim "
    "is {out}'s. K -> K + 1: the forward is the first chunk ({out}'s outputs and {state}'s state after it), then "
    "K chunks from that state; the backward (core.chunked.backprop_chunks) runs the K chunks' backward first "
    "(the hypothesis: the transpose of their Jacobian, the cotangent sent back to the state after the first "
    "chunk included), then {out}'s backward on the first chunk's output cotangent and {state}'s on that "
    "cotangent, each the transpose of its Jacobian by {claims} -- proved for every chunk length {n}, so for "
    "chunks of C steps and the last partial one alike; the chain rule composes them, and an input read by "
    "several chunks or by both ops gets the sum of its cotangents as its uses add up.")


def chunked_instance_dims(op: Op) -> list[dict]:
    """The chunked op against the definition, unrolled at its default chunk size: T = 1 (one partial
    chunk at C >= 2) and T = C (one whole chunk), which the ring must prove, and T = C + 1 (a whole chunk
    and a partial one), which must not be refuted."""
    rec, C = op.chunked.recurrent.recurrence, op.params[op.chunked.chunk].default
    return [{**op.dims[0], rec.length: t} for t in dict.fromkeys((1, C, C + 1))]


def prove_chunked(op: Op, claim: str, budget: float, seed: int, certificate, prove_general) -> Certificate:
    """The chunked op's claims for every length and chunk size, from its chunk ops' claims for every
    chunk length (``core.chunked``). Arguments as ``prove_by_induction``'s."""
    cells = op.chunked            # the construct's names and premise test, read off the op it built
    rec = cells.recurrent.recurrence
    run = _Induction(op, claim, budget, seed, certificate,
                     {"proof": "induction on the number of chunks", "length": rec.length,
                      "chunk_size": cells.chunk, "chunk_length": cells.chunk_length,
                      "recurrence": cells.recurrent.name, "state_op": cells.state.name, "out_op": cells.out.name},
                     chunked_instance_dims(op))
    if not cells.intact(op):
        return run.not_own("the op's forward or backward is not the chunked recurrence's own (core.chunked: the "
                           "chunk ops run chunk after chunk, their backwards in reverse)", "the chunks")
    if claim == cells.equals_recurrent:
        needed = [(cells.state, c) for c in cells.state_laws] + [(cells.out, c) for c in cells.out_laws]
        template = CHUNKED_FORWARD
    elif claim.startswith("vjp["):
        needed = [(o, c) for o in cells.steps for c in dict.fromkeys([f"vjp[{rec.carry}]", claim])
                  if c[4:-1] in o.inputs]
        template = CHUNKED_BACKWARD
    else:
        return run.done("inconclusive", reason=f"refused: {claim!r} is neither a VJP claim nor {cells.equals_recurrent}; "
                                               f"only those follow from the chunk ops' claims by induction")
    forged = [f"{o.name}: {c}" for o, c in needed if not c.startswith("vjp[") and not cells.is_premise(o, c)]
    if forged:
        return run.done("inconclusive", reason=f"refused: the chunk ops' laws {forged} are not the ones chunked "
                                               f"generated from {rec.cell.name}, so they are no premise of the induction")
    refused = run.undeclared(needed, "chunk ops")
    if refused is not None:
        return refused
    proved = run.premises(needed, prove_general)
    for row in proved.values():
        if row["verdict"] == "proved-general" and row["statement_dims"].get(cells.chunk_length) != cells.chunk_length:
            # the chunk's length must be a symbol of the statement: every chunk size, the partial one too
            row.update(verdict="inconclusive", reason=f"not stated for every chunk length {cells.chunk_length}: "
                                                      f"{row['statement_dims']}")
    run.evidence["chunk_op_claims"] = {f"{o.name}: {c}": r for (o, c), r in proved.items()}
    short = run.unproved(proved, "the chunked op", "the chunked op is not proved unrolled at one chunk (partial and "
                                                   "whole): its loop is not checked against the definition")
    if short is not None:
        return short
    assumptions = sorted({a for r in proved.values() for a in r["assumptions"]
                          if not a.startswith(f"{cells.chunk_length} ")}
                         | {f"{rec.length} >= 1", "C >= 1 (an integer)"})
    claims = " and ".join(f"{o.name}'s {c}" for o, c in needed)
    return run.done("proved-general", assumptions,
                    statement=template.format(T=rec.length, n=cells.chunk_length, rec=cells.recurrent.name,
                                              cell=rec.cell.name, state=cells.state.name, out=cells.out.name,
                                              claims=claims),
                    **({"variable": claim[4:-1]} if claim.startswith("vjp[") else {}))
