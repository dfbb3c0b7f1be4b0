"""``warmscale demo``: one real burst through today's common autoscaling setup and through
warmscale, side by side, with no cluster and no servers (command line: :mod:`warmscale.demo.cli`).

Two fleets of simulated vLLM engines (each serving a real ``/metrics``) get the same requests from
a burst of a real trace (shipped in the package). One is scaled the way most clusters do it today:
Prometheus scrapes every 15 s, the KEDA Prometheus scaler asks for a replica per 5 waiting requests
(polling 30 s), the HPA acts, and every new replica starts cold. The other is scaled by warmscale:
the real scaler (gRPC, in-memory store) reads the engines through the production signal sources,
KEDA's push activation and the HPA apply its target, and its warm pool holds placeholders on staged
nodes. A third fleet is warmscale with a hot pool as well (:mod:`warmscale.demo.hot`): sleeping
engines on a few GPUs shared with other, idle models, woken by the production waker on the
scaler's intent, charged their share of the pool. All climb the same startup ladder
(:mod:`warmpool.startup_model`) and run the trace benchmark's calibrated engine profile
(:mod:`warmscale.simulation.profiles`). After the run a fixed fleet as large as warmscale's
GPU-seconds buy replays the same requests (:mod:`warmscale.demo.fixed`). Time is compressed:
traffic, engines, every control loop and the startups run ``--speed`` times faster.
"""

