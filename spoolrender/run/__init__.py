"""One run of one claimed job."""
