"""Storage models: the gcsfuse reader replay, the what-if model of other storage, and the measured
mount profiles applied to a trace."""
