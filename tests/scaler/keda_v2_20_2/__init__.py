"""Client stubs generated from KEDA v2.20.2's externalscaler.proto (python -m warmscale.proto.generate)."""
