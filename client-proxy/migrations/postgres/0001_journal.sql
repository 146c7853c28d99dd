-- The proxy's journal: each transaction it accepted and has not finished, and what each of
-- its tasks left on the servers. Rows are per proxy (its name), so proxies may share one
-- database.
CREATE TABLE journal_transactions (
    proxy TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    client TEXT NOT NULL,
    -- FNV-1a of the encoded graph: a resend of the same id must carry the same graph.
    graph_hash BIGINT NOT NULL,
    owner TEXT NOT NULL,
    -- The metaserver's ScheduleReply, protobuf.
    placement BYTEA NOT NULL,
    accepted_ms BIGINT NOT NULL,
    PRIMARY KEY (proxy, transaction_id)
);

CREATE TABLE journal_tasks (
    proxy TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    task BIGINT NOT NULL,
    -- A TaskReport whose outputs are the objects the task kept, protobuf.
    report BYTEA NOT NULL,
    PRIMARY KEY (proxy, transaction_id, task)
);
