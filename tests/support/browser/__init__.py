"""Helpers for the HTTP server and dashboard tests: a real `spoolrender serve`, a real Chromium."""
