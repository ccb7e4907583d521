"""``python -m tinycore``: the tinycore command line (see tinycore.cli)."""
import sys
from tinycore.cli import main

sys.exit(main())
