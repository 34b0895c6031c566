"""The words every layer shares."""
