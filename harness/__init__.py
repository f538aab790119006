"""privacy-harness: evaluate membership-inference defenses on their most vulnerable samples."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("privacy-harness")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.2.1"
