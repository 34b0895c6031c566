"""The Remotion renderer and its Node worker."""
