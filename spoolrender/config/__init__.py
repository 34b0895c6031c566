"""spoolrender.yaml, typed and validated."""
