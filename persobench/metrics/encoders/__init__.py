"""Text encoders for the embedding metrics: each distinct text embedded once, cached on disk.

* :mod:`~persobench.metrics.encoders.encoder`: :class:`TextEncoder`, batches of distinct texts.
* :mod:`~persobench.metrics.encoders.embedding_models`: BERTScore's scorer and the sentence-embedding model,
  loaded once per process.
* :mod:`~persobench.metrics.encoders.embedding_shelf`: the disk shelf of embeddings.
* :mod:`~persobench.metrics.encoders.encoder_streams`: forward passes in single-threaded streams on a CPU.
"""
