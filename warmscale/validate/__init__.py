"""``warmscale validate``: ScaledObjects and annotated workloads checked offline, by the parsers the
scaler (:func:`warmscale.scaler.config.parse_metadata`) and the warm-pool controller
(:func:`warmscale.warmpool.annotations.parse_annotations`) apply to them in the cluster."""
