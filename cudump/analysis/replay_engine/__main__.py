"""`python -m cudump.analysis.replay_engine [FOLDER] [--runs N] [--device D]`: the extract
folder's `python replay.py`, run from the installed package."""

import sys

from .replay import main

sys.exit(main())
