import sys

from verl_ext.launch.cli import main

sys.exit(main())
