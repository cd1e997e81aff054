"""The fixed-dims prover: a claim traced at concrete dims into one scalar identity (``claims``), J t by
forward mode over the traced DAG (``evaluate``), the exact fields (``fields``) and the ladder that
normalises the residual in them (``strategies``, ``prover``), and the closed formulas of the laws
(``formulas``)."""
