"""``table.format=delta``: a Delta Lake table at the output's root, committed with delta-rs
(``deltalake``): the format (``format``), the followed table (``table``), how delta-rs reaches
the output's store (``storage``), the statistics a commit lists (``stats``) and the snapshot a
process keeps and refreshes (``snapshots``)."""
