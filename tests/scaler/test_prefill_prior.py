"""``prefillTpsPrior``: the capacity prior's prefill rate, set by the operator (or by the demo, whose
engines run ``speed`` times faster than the wall clock the scaler measures rates on)."""

from __future__ import annotations

import pytest

from warmscale.scaler.capacity import PRIORS, prior_for
from warmscale.scaler.config import ConfigError, parse_metadata


@pytest.mark.parametrize(("meta", "tps", "seqs"), [
    ({}, PRIORS["vllm"].prefill_tps, PRIORS["vllm"].max_seqs),
    ({"modelProfile": "8b-h100"}, 16_000.0, 1024.0),
    ({"prefillTpsPrior": "37000"}, 37_000.0, PRIORS["vllm"].max_seqs),
    ({"modelProfile": "8b-h100", "prefillTpsPrior": "128000"}, 128_000.0, 1024.0),
])
def test_the_prior_takes_the_keys_rate_and_keeps_the_profiles_sequences(meta: dict[str, str], tps: float,
                                                                        seqs: float) -> None:
    cfg = parse_metadata({"engine": "vllm", "podSelector": "app=x", **meta})
    prior = prior_for(cfg.engine, cfg.model_profile, cfg.prefill_tps_prior)
    assert (prior.prefill_tps, prior.max_seqs) == (tps, seqs)


@pytest.mark.parametrize("raw", ["0", "-5", "abc", "1e12"])
def test_a_bad_prior_names_the_key(raw: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_metadata({"engine": "vllm", "podSelector": "app=x", "prefillTpsPrior": raw})
    assert exc.value.key == "prefillTpsPrior"


def test_the_observation_sizes_by_the_prior_before_anything_is_measured() -> None:
    """Before any measurement the observation's per-replica prefill rate is the key's (it failed before
    the key existed: the engine's generic prior)."""
    from warmscale.scaler.observation import observe
    from warmscale.scaler.state import ScalerState
    from warmscale.signals.model import Snapshot

    cfg = parse_metadata({"engine": "vllm", "podSelector": "app=x", "prefillTpsPrior": "50000"})
    obs, _ = observe(Snapshot(taken_at=100.0), ScalerState(), cfg)
    assert obs.prefill_tps == 50_000.0
