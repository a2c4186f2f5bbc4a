"""``python -m persobench.jobs job DIR``: the detached runner of one background job."""

import sys

from persobench.jobs.job_process import main

sys.exit(main())
