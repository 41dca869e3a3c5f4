"""The product's settings with the cost probe (benchmarks.serving.probe) in front: for the load benchmark only."""

from annotate.settings import *  # noqa: F403
from annotate.settings import MIDDLEWARE

MIDDLEWARE = ["benchmarks.serving.probe.RequestCost", *MIDDLEWARE]
