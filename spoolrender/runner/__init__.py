"""The runner loop."""
