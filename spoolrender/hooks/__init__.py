"""Completion hooks."""
