"""The run store and the file helpers every stage writes through.

* :mod:`~persobench.store.run_store`: :class:`RunStore`, one folder per run (layout, manifests, tables,
  read-merge-write under the run's state lock, the store's fingerprint every cache keys on).
* :mod:`~persobench.store.run_lookup`: runs by id or unique prefix (``resolve_runs``, ``open_store``).
* :mod:`~persobench.store.run_records`: the typed, versioned records of a manifest's ``extra``.
* :mod:`~persobench.store.locks`: a run folder's two locks (state and run).
* :mod:`~persobench.store.files`: atomic writes, checksums, the one-line error for a refused write.
* :mod:`~persobench.store.csv_io`: CSV in and out safely (strict quotes, no formula cells).
"""
