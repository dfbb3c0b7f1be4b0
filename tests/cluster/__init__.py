"""Tests of the local Kubernetes cluster harness (warmscale/localcluster) and the pytest fixtures
over it (fixtures.py), with the test-only LeaderWorkerSet controller stand-in (lws_standin.py).
``python -m tests.cluster`` is ``python -m warmscale.localcluster``. See docs/cluster.md."""
