#!/usr/bin/env python
"""Random graphs against the reference (see braze/fuzz/__main__.py):

    python scripts/fuzz.py --graphs 10000 --jobs 2 --seed 0
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from braze.fuzz.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
