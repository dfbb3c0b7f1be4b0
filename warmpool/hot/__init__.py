"""The hot tier: engines that sleep on a shared GPU and wake in seconds (docs/hot-tier.md).

- :mod:`.surface` (pure): each engine's sleep/wake HTTP surface as calls to make, and whether the
  tier can use it at all (TensorRT-LLM, Ray Serve LLM and TGI cannot: the reason goes in an Event).
- :mod:`.canary`: a woken engine counts as ready only after a greedy canary generation returns what
  the same engine returned before it slept (several upstream bugs serve wrong output after a wake).
- :mod:`.client` (I/O): the calls against an engine, with deadlines, and the drain before a sleep.
"""
