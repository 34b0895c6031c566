"""The unit tier (issue 27): no subprocess, no runner thread; a real spool in a temp dir."""
