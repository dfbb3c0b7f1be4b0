"""The policy as a pipeline of pure steps (docs/policy.md, "The decision pipeline").

Each step is a function of (its input, its own state, config, now) and appends one
:class:`~warmscale.scaler.decide.trace.Step` to the decision's trace, so a decision says how every
step moved the count and why. :func:`warmscale.scaler.policy.decide` runs them in order:
``need -> confirm -> guards -> bounds -> hold -> landing``.
"""
