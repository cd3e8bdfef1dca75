"""Encryption: key references and rings, and the two ways rotsink encrypts a file.

* :mod:`~commit_protocol.crypto.keys`: key *references* (``env:VAR``, ``file:/path``), key ids,
  the ring of reading keys; key bytes are resolved where used and never logged or pickled.
* :mod:`~commit_protocol.crypto.sealed`: the appendable authenticated container of row files
  (AES-256-GCM records bound to the header and their offset, a FINAL record at the end).
* :mod:`~commit_protocol.crypto.parquet`: Parquet Modular Encryption through pyarrow, with
  data keys wrapped as parquet-mr's ``KeyToolkit`` does, so Spark's reader decrypts them.
"""
