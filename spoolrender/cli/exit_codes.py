"""The exit statuses of `spoolrender` (documented in `spoolrender run --help`)."""

EXIT_OK = 0
EXIT_ERROR = 1  # bad config, missing spool, invalid job on submit, unknown id
EXIT_USAGE = 2  # argparse
EXIT_JOBS_FAILED = 3  # run --drain: at least one job failed for good during this run
EXIT_PAUSED = 4  # run --drain: the spool is paused, nothing was claimed
EXIT_MAX_JOBS = 5  # run --max-jobs: the limit was reached and those jobs finished
EXIT_MAX_RUNTIME = 6  # run --max-runtime: the time was up (running jobs went back to retry/)
EXIT_INTERRUPTED = 130  # SIGINT ended a short command (128 + SIGINT, as shells report it)
