"""Run a campaign locally or on a Ray cluster, or report on one: `verl_ext/campaign/cli.py` (its --help)."""

import sys

from verl_ext.metrics_log.terminal import capture_early

if __name__ == "__main__":  # first: what the imports and the pre-flight print goes to the campaign's log
    capture_early()

from verl_ext.campaign.cli import main

if __name__ == "__main__":
    sys.exit(main())
