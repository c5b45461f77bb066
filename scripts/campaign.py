"""Run a campaign locally or on a Ray cluster, or report on one: `verl_ext/campaign/cli.py` (its --help)."""

import sys

from verl_ext.campaign.cli import main

if __name__ == "__main__":
    sys.exit(main())
