"""Helpers shared by test modules that are too large to live beside the tests that use them."""
