"""AWS Glue's optimistic locking on moto's Glue (served beside its S3 by
:func:`tests.support.s3server.start_moto_server`).

Glue's ``UpdateTable`` takes the ``VersionId`` the writer read and fails with
``ConcurrentModificationException`` when the table has a newer version (AWS Glue API,
UpdateTable); pyiceberg's ``GlueCatalog`` commits that way, which is what makes two writers'
Iceberg commits exclusive. moto 5 ignores ``VersionId`` (its ``update_table`` stores
whatever comes: measured, a stale writer's commit replaced another's snapshot), so a test of
writers racing through Glue would pass or fail by luck. :func:`honour_table_versions` makes
moto's ``UpdateTable`` check it, as Glue does; moto's server handles one request at a time
(see ``start_moto_server``), so the check and the update are one step.
"""

from __future__ import annotations

import functools
from typing import Any


def honour_table_versions() -> None:
    """Patch moto's Glue responses in this process (idempotent)."""
    from moto.glue.exceptions import GlueClientError
    from moto.glue.responses import GlueResponse

    original = GlueResponse.update_table
    if getattr(original, "honours_versions", False):
        return

    @functools.wraps(original)
    def update_table(self: Any) -> Any:
        version = self.parameters.get("VersionId")
        if version is not None:
            database, name = self.parameters["DatabaseName"], self.parameters["TableInput"]["Name"]
            current = str(self.glue_backend.get_table(database, name)._current_version)
            if version != current:
                raise GlueClientError("ConcurrentModificationException",
                                      f"table {database}.{name} is at version {current}, "
                                      f"not {version}")
        return original(self)

    update_table.honours_versions = True  # type: ignore[attr-defined]
    GlueResponse.update_table = update_table  # type: ignore[method-assign]
