"""The every-size prover: a spec run with symbolic dimensions (``shape_trace``), the derivation turned
into a statement for all sizes (``form``), normalised (``normal``) and cross-checked against the spec
at concrete sizes (``general``)."""
