"""The diagnostics several layers use (pure): the cold-start and next-layer findings of ``warmscale
advise``, which the scaler also computes (``scaler/advice.py``) and the warm-pool controller turns into
Events on workloads. ``warmscale advise`` (``warmscale/advise/``) is the command line over them."""
