"""Which solutions to label next (``rules``: plain functions the pipeline and the campaign
simulator share) and which solutions a command means (``solutions``: selectors)."""
