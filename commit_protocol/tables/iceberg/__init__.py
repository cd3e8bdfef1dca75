"""``table.format=iceberg``: an Apache Iceberg table in a catalog, committed with pyiceberg:
the format (``format``), the followed table (``table``), the catalog (``catalog``), the data
files' layout and field ids (``files``, ``ids``, ``schema``), the query's mark and the
transaction it commits in (``marks``, ``transaction``) and the snapshot expiry (``maintenance``)."""
