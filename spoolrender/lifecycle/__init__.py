"""Carrying out decided runs; recovering dead runners' jobs."""
