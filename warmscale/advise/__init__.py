"""Next-layer diagnostics: which orchestration layer a repeated failure asks for.

Functional core (:mod:`.model`, :mod:`.detect`: pure functions of recorded signals, a policy and
``now``), imperative shell (:mod:`.collect` reads the cluster and Prometheus, :mod:`.cli` prints).
"""
