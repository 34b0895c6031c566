"""Uploads, scans and the claim."""
