"""spoolrender: a filesystem spool-directory batch runner for Remotion video renders."""

__version__ = "0.1.0"
