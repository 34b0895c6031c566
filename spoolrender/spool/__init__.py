"""Every on-disk operation and name of the spool."""
