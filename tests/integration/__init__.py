"""The integration tier: the package's code in this process or in runner processes over a
temp spool, with real helper processes (render commands, the worker's node scripts, sshfs)."""
