"""The modular prover: the spec's own numpy code run on arrays mod a prime p with dual numbers at
production dims (``backend``, arithmetic in ``arith`` and ``kernels``), the randomised identity test
and its false-pass bound (``check``, ``bound``), and mpmath's confirmation of a nonzero residual with
atoms (``confirm``)."""
