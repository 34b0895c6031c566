"""The end-to-end tier: spoolrender's programs as their users start them (the CLI, serve, the
dashboard in Chromium), real upload clients, contrib's tools and the docs' examples."""
