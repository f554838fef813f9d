"""What the bench scripts share; no bench script imports another.

Importing the package puts the repository root on ``sys.path``, so ``tests.support`` (the
fixtures' servers and processes) can be used by every module here and by the scripts.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
