"""What the driver commits: a batch id from ``Committer.commit`` to the log, the table and the
clean-up, top to bottom:

1. ``committer`` -- recover, plan, commit and abort micro-batches (the entry); ``owners`` --
   this query's repeated commit told from another query's; ``aborting`` -- what an abort
   may delete (never what a committed or decided batch names);
2. ``merge`` -- the tasks' reports checked against committed state and storage, folded in;
3. ``claims`` -- the fence against late attempts;
4. ``driver_rolls`` -- the files a commit rule rolls that no task touched;
5. the intent, then the log file (``commit_protocol.log``): the commit point;
6. ``publishing`` -- finalized files take their final names; ``partition_markers`` -- the
   ``_SUCCESS`` markers of completed directories;
7. the table that follows the log (``commit_protocol.tables``); ``after_commit`` -- how the
   steps after the commit point retry and fail, never undoing the batch;
8. ``housekeeping`` -- deleting what nothing needs any more, after ``log.cleanupDelay``;
9. ``commit_report`` -- the INFO lines of the batch and of the temp files its clean-up
   deleted.
"""
