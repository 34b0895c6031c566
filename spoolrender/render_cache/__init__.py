"""The render cache: verified outputs by key."""
