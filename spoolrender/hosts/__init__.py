"""Host health and blocks."""
