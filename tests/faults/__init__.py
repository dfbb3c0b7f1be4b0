"""Fault suite: real processes (scaler CLI, Redis, Prometheus, hostile loopback engines, the local
control plane) driven through faults and hostile input. Marker ``faults``; see docs/reliability.md."""
