"""The scaler's warmscale_advice gauge: the cold-start finding computed from what its trackers recorded
(injected clock), exported only once the failure repeated, and dropped when it falls out of the window."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from warmscale.scaler.advice import AdviceBook
from warmscale.scaler.metrics import ScalerMetrics

H = 3600.0
T0 = 1_800_000_000.0


def value(reg: CollectorRegistry) -> float | None:
    return reg.get_sample_value("warmscale_advice", {"namespace": "llm", "scaledObject": "vllm-llama",
                                                     "finding": "cold-start-slo"})


def burst(book: AdviceBook, t0: float, ttr: float = 300.0) -> None:
    book.record("llm", "vllm-llama", t0 - 10, desired=2, ready=2, ttft_s=0.2, slo_s=0.5, time_to_ready_s=ttr)
    for dt in range(0, int(ttr), 5):
        book.record("llm", "vllm-llama", t0 + dt, desired=6, ready=2, ttft_s=2.0, slo_s=0.5, time_to_ready_s=ttr)
    book.record("llm", "vllm-llama", t0 + ttr, desired=6, ready=6, ttft_s=0.3, slo_s=0.5, time_to_ready_s=ttr)
    book.record("llm", "vllm-llama", t0 + ttr + 60, desired=2, ready=2, ttft_s=0.2, slo_s=0.5, time_to_ready_s=ttr)


def test_gauge_appears_on_the_third_cold_miss_and_goes_after_the_window() -> None:
    metrics = ScalerMetrics()
    reg = metrics.registry
    book = AdviceBook(metrics.advice, evaluate_every_s=0.0)
    burst(book, T0)
    burst(book, T0 + 4 * H)
    assert value(reg) is None  # twice: silent
    burst(book, T0 + 8 * H)
    assert value(reg) == 3
    # Quiet for a day: the episodes leave the window, the series goes.
    for k in range(1, 30):
        book.record("llm", "vllm-llama", T0 + 8 * H + k * H, desired=2, ready=2, ttft_s=0.2, slo_s=0.5,
                    time_to_ready_s=300.0)
    assert value(reg) is None


def test_history_is_bounded_by_the_window() -> None:
    book = AdviceBook(ScalerMetrics().advice, evaluate_every_s=1e9)
    for k in range(100_000):
        book.record("llm", "w", T0 + k, desired=1 + k % 2, ready=1, ttft_s=None, slo_s=None, time_to_ready_s=None)
    (h,) = book._h.values()
    assert len(h.samples) <= 2048 and h.samples[-1].at == T0 + 99_999
    quiet = AdviceBook(ScalerMetrics().advice, evaluate_every_s=1e9)
    for k in range(100_000):  # nothing changes: a heartbeat every 5 minutes, within the window
        quiet.record("llm", "w", T0 + k, desired=1, ready=1, ttft_s=0.1, slo_s=0.5, time_to_ready_s=None)
    (h,) = quiet._h.values()
    assert h.samples[0].at >= T0 + 99_999 - 24 * H - 300 and len(h.samples) <= 24 * 12 + 1
