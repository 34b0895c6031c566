"""The Remotion tier: real renders with Remotion, Node and Chromium (marked ``remotion``)."""
