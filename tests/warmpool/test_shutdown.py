"""The controller always stops when its leadership ends (a swallowed cancellation found by the fault
suite: `asyncio.wait_for` on Python 3.11 can lose a cancellation arriving as the awaited event fires)."""

from __future__ import annotations

import asyncio

from warmscale.warmpool.kube import cancel_and_wait, wait_event


async def test_cancel_and_wait_cancels_again_a_task_that_swallowed_it() -> None:
    swallowed = []

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(1)  # the first cancellation is lost, as wait_for may lose it

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, every=0.05), 5)
    assert task.cancelled() and swallowed == [1]


async def test_wait_event_keeps_a_cancellation_arriving_with_the_event() -> None:
    for _ in range(200):
        ev = asyncio.Event()
        stopped = []

        async def loop(ev: asyncio.Event) -> None:
            while True:
                await wait_event(ev, 10)
                ev.clear()
                await asyncio.sleep(0)

        task = asyncio.create_task(loop(ev))
        await asyncio.sleep(0)
        ev.set()  # the event fires and the cancellation arrives in the same iteration
        task.cancel()
        try:
            await asyncio.wait_for(task, 2)
        except asyncio.CancelledError:
            stopped.append(1)
        assert stopped and task.cancelled()
    assert await wait_event(asyncio.Event(), 0.01) is False
