"""spoolrender's version, where every layer may read it (``spoolrender.__version__`` re-exports it).

The package root imports :mod:`spoolrender.api` on first use of ``spoolrender.Spool``, so a module
that read the version from the root would depend on the whole Python API (import-linter's layers).
"""

__version__ = "0.1.0"  # pyproject.toml's [project] version says the same
