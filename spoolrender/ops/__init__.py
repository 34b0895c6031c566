"""What operators read and do."""
