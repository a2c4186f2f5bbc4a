"""The foundation every stage may use: nothing here imports a stage (only :mod:`persobench.errors`).

* :mod:`~persobench.core.registry`: :class:`Registry`, name -> factory, imported on first use (datasets,
  providers, metric families, executors, batch backends).
* :mod:`~persobench.core.secrets`: the one secret-handling module (redact, scrub, secret environment, key hosts).
* :mod:`~persobench.core.console`: terminal output (control characters escaped, progress on stderr).
* :mod:`~persobench.core.processes`: whether another process is alive.
* :mod:`~persobench.core.structured`: the reply's JSON Schema for structured output.
* :mod:`~persobench.core.gc_pace`: fewer garbage-collector passes during a scoring pass.
* :mod:`~persobench.core.ngram_kernels`: the BLEU / ROUGE kernels a lexical worker process runs.
"""
