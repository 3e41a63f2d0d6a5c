"""gpushare: GPUSharePool operator, admission webhook, node agent, quota helper and CLI.

The version has one source, ``pyproject.toml``; ``__version__`` reads it from the installed
distribution's metadata.
"""

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "gpushare-operator"

try:
    __version__ = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
