"""``python -m tests.fakes``: run a fake server standalone (see :func:`tests.fakes.servers.main`)."""

import sys

from tests.fakes.servers import main

sys.exit(main())
