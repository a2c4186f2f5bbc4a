"""``python -m persobench.jobs job DIR``: the detached runner of one background job (the same as
``python -m persobench.jobs.job_process job DIR``, which the launcher starts)."""

import sys

from persobench.jobs.job_process import main

sys.exit(main())
