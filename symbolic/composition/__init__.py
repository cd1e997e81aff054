"""The compositional prover: a composite's wiring proved with opaque node Jacobians (``wiring``,
``algebra``), and the certificate that cites each node's own certificate where it covers the values
the composite calls it at (``compose``)."""
