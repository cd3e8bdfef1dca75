"""The public options (DESIGN section 5): their names (``names``), their values
(``values``), the sink's parsed into a ``SinkConfig`` (``sink``), and the ``table.*``
options (``tables``)."""
