"""What the pipeline's steps share: the fleet as the decision finds it (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from warmscale.scaler.config import ScalerConfig
from warmscale.scaler.ladder import Ladder, single, time_to_ready, with_hot
from warmscale.scaler.observation import Observation
from warmscale.scaler.state import ScalerState


@dataclass(frozen=True)
class Fleet:
    """Ready and starting replicas, the warm ladder they come back by, and the bounds in force now."""

    ladder: Ladder
    ttr: float  # time-to-ready of the next replica (the ladder's first step)
    ready: int
    starting: int
    min_replicas: int  # the ScaledObject's minReplicas raised by the warm pool's floor
    may_zero: bool  # scaleToZero, and the warm pool permits zero now
    # Hot-tier sleepers awake and routed: counted in ``ready`` (they serve), not the Deployment's own.
    hot_awake: int = 0
    own_ttr: float = 0.0  # time-to-ready of the scale target's own next replica (the ladder without hot)

    @property
    def own_ready(self) -> int:
        """The scale target's own ready replicas (``ready`` without the awake sleepers)."""
        return self.ready - self.hot_awake

    @property
    def provisioned(self) -> int:
        """Ready plus starting replicas, an awake sleeper and the starting replica it bridges counted
        once: the hot step keeps a sleeper awake only for a shortfall of the scale target's own
        replicas (decide/hot.py) and releases it when they are ready, so ``hot_awake`` sleepers stand in
        for up to as many starting ones. Counted twice, every rule that holds at least the provisioned
        count (TTFT, KV, queue) raised the count by the awake sleepers at each decision while the scale
        target started replicas for them: 4 -> 7 -> 10 on the demo's first wave."""
        return self.own_ready + max(self.starting, self.hot_awake)

    @property
    def floor(self) -> int:
        return 0 if self.may_zero else max(1, self.min_replicas)


def _starting_estimate(obs: Observation, state: ScalerState, ready: int, ttr: float, now: float) -> int:
    if obs.starting_replicas is not None:
        return obs.starting_replicas
    if state.last_desired is None or state.last_increase_at is None:
        return 0
    if now - state.last_increase_at > ttr:
        return 0
    return max(0, state.last_desired - ready)


def fleet_of(obs: Observation, state: ScalerState, cfg: ScalerConfig, now: float) -> Fleet:
    ladder: Ladder = obs.ttr_ladder or single(
        obs.time_to_ready_s if obs.time_to_ready_s is not None else cfg.time_to_ready_seconds)
    own_ttr = time_to_ready(ladder, 1)  # the scale target's own next replica (what starting ones take)
    # The hot tier: asleep sleepers are the ladder's first rung, awake ones ready capacity.
    hot_awake = obs.hot_awake if obs.hot_asleep is not None else 0
    if obs.hot_asleep is not None and obs.hot_wake_s is not None:
        ladder = with_hot(ladder, obs.hot_asleep, obs.hot_wake_s)
    ttr = time_to_ready(ladder, 1)
    if obs.ready_replicas is not None:
        ready = obs.ready_replicas
    elif obs.known_replicas + obs.unknown_replicas > 0:
        ready = obs.known_replicas + obs.unknown_replicas
    else:
        ready = 0
    starting = _starting_estimate(obs, state, ready, own_ttr, now)
    ready += hot_awake
    # The warm pool's schedule binds on top of the ScaledObject's own bounds: its floor raises
    # minReplicas, and zero needs both scaleToZero and the warm pool's permission at this instant.
    min_replicas = max(cfg.min_replicas, obs.warm_floor or 0)
    may_zero = cfg.scale_to_zero and obs.zero_allowed is not False and not obs.warm_floor
    return Fleet(ladder=ladder, ttr=ttr, ready=ready, starting=starting,
                 min_replicas=min_replicas, may_zero=bool(may_zero), hot_awake=hot_awake,
                 own_ttr=own_ttr)
