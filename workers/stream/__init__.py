"""The worker: the faust app, input ingestion, the batch processor, the producers and their
transactions, partitioning, the session store and its local state; `Owner.handle` is the one
step it shares with `replay` and `audit`."""
