import sys

from workspace_tools.cli import main

sys.exit(main())
