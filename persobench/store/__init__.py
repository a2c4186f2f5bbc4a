"""The run store and the file helpers every stage writes through.

* :mod:`~persobench.store.run_store`: :class:`RunStore`, one folder per run (layout, manifests, tables,
  read-merge-write under the run's state lock, the store's fingerprint every cache keys on).
* :mod:`~persobench.store.run_lookup`: runs by id or unique prefix (``resolve_runs``, ``open_store``).
* :mod:`~persobench.store.run_records`: the typed, versioned records of a manifest's ``extra``.
* :mod:`~persobench.store.locks`: a run folder's two locks (state and run).
* :mod:`~persobench.store.files`: atomic writes, checksums, the one-line error for a refused write.
* :mod:`~persobench.store.csv_io`: CSV in and out safely (strict quotes, no formula cells).
"""

from persobench.store.csv_io import CSVFormatError, csv_text, read_csv_rows
from persobench.store.files import (atomic_write_bytes, atomic_write_json, atomic_write_text, sha256_file, utc_now,
                                    write_output, write_refused)
from persobench.store.locks import lock_holder
from persobench.store.run_lookup import open_store, resolve_run, resolve_runs
from persobench.store.run_records import RunExtra
from persobench.store.run_store import (Run, RunManifest, RunStore, StoreProblem, default_home,
                                        make_run_id)

__all__ = [
    "CSVFormatError", "Run", "RunExtra", "RunManifest", "RunStore", "StoreProblem",
    "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "csv_text", "default_home", "lock_holder",
    "make_run_id", "open_store", "read_csv_rows", "resolve_run", "resolve_runs", "sha256_file", "utc_now",
    "write_output", "write_refused",
]
