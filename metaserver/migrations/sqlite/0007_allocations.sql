-- Batch jobs (docs/slurm.md): each server's job end, job, allocation queue and how long
-- before the end it drains, so that a restarted metaserver still knows when its servers
-- must stop; 0 and '' when it has none.
ALTER TABLE servers ADD COLUMN walltime_end REAL NOT NULL DEFAULT 0;
ALTER TABLE servers ADD COLUMN batch_job TEXT NOT NULL DEFAULT '';
ALTER TABLE servers ADD COLUMN allocation TEXT NOT NULL DEFAULT '';
ALTER TABLE servers ADD COLUMN drain_seconds REAL NOT NULL DEFAULT 0;

-- Allocation queues: the settings as given (the protobuf ninf.v1.AllocQueueSpec), whether
-- it is paused, and its failures in a row with the last one's message.
CREATE TABLE alloc_queues (
    name TEXT PRIMARY KEY,
    spec BLOB NOT NULL,
    state TEXT NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);

-- The jobs a queue submitted: pending, running, ended, failed or cancelled.
CREATE TABLE alloc_jobs (
    queue TEXT NOT NULL REFERENCES alloc_queues (name) ON DELETE CASCADE,
    job_id TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    script TEXT NOT NULL,
    output TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (queue, job_id)
);
