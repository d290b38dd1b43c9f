import sys

from ackscope.apps.cli import main

sys.exit(main())
