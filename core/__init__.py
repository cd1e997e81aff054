"""The floor beneath the specs: the machinery claims are written in and certified with.

``registry`` (how a spec declares an op), ``backends`` and ``trace`` (the number systems a spec runs
on), ``validate`` (spec hygiene), ``graph`` (the tape-graph engine), ``reference`` (float references),
``tolerance`` (the one tolerance rule), ``certificate`` and ``budget`` (certificates and budgets). See ARCHITECTURE.md.
"""
