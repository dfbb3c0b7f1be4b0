"""Offline batch next to online serving: a worker that drains a Redis list and loses nothing when its pod
is preempted (:mod:`warmscale.batch.worker`)."""
