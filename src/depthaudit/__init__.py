"""depthaudit: does a credit-assignment method train depth, and is a residual network deep enough.

The Python API (one function per command, the config objects the CLI builds; see docs/python-api.md)::

    import depthaudit as da

    report = da.audit(da.AuditConfig(base=da.TrainConfig(dataset="mnist1d"), methods=("bp", "fa")), "out/audit")

Names are imported on first use, so ``import depthaudit`` (and ``depthaudit --help``) stays light.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("depthaudit")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

# public name → module that defines it (PEP 562 lazy attributes: torch is imported only when one is used)
_LAZY = {
    "audit": "api", "ladder": "api", "intervene": "api", "identity": "api", "train": "api", "Result": "api",
    "saturation": "api", "grow": "api", "probes": "api", "ConfigError": "errors", "UsageError": "errors",
    "nothing_trains": "config",
    "ProbesConfig": "experiments.probes", "InterveneConfig": "experiments.intervene",
    "TrainConfig": "config", "AuditConfig": "experiments.audit", "LadderConfig": "experiments.ladder",
    "SaturationConfig": "experiments.saturation", "GrowConfig": "experiments.grow", "FAMILIES": "experiments.families",
    "DepthFamily": "experiments.families",
    "Thresholds": "verdicts", "SweepOptions": "sweep", "load_data": "data",
    "METHODS": "methods", "MODELS": "models", "DATASETS": "data", "CreditMethod": "methods", "Option": "methods",
    "ResidualAdapter": "models",
    "CreditEvaluator": "evaluator", "capture_credits": "evaluator", "TrainingMonitor": "evaluator",
    "frozen_twin": "evaluator", "bp_twin": "evaluator",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'depthaudit' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
