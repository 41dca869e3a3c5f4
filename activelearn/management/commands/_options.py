"""What the PRM commands share: how a metric prints, and the LM-adaptation settings read from a command's options."""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from activelearn.prm.adaptation import AdaptConfig


def fmt(value: float | None) -> str:
    """A metric as the commands print it."""
    return "n/a" if value is None else f"{value:.4f}"


def adapt_config(options: Mapping[str, Any], names: Mapping[str, str]) -> "AdaptConfig":
    """AdaptConfig's defaults, overridden by the options ``names`` maps its fields to, where given (not None).

    Only the named fields are read: train_prm's own ``--learning-rate`` is the
    PRM's, not the adaptation's, which is ``--adapt-learning-rate``.
    """
    # Imported here: train_prm imports this module, and without --adapt-steps torch need not load.
    from activelearn.prm.adaptation import AdaptConfig

    return AdaptConfig(**{field: options[name] for field, name in names.items() if options.get(name) is not None})
