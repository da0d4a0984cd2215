"""depthaudit: does a credit-assignment method train depth, and is a residual network deep enough."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("depthaudit")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
