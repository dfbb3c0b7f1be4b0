"""What the demo, the benchmarks and the cluster harness simulate alike, beneath all three: the
simulated engine (a small continuous-batching vLLM with the real metric names, ``engine.py``) and its
HTTP surface with the sleep endpoints (``engine_http.py``), and the models of KEDA's and the HPA's
actuation (``actuation.py``). The benchmarks' detailed engine and cluster stay in ``benchmarks/sim``;
the policy, the planner and the startup model they all run are the production ones."""
