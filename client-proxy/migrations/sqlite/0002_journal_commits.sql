-- Transactions that write data handles: what they did, journaled before the handles get
-- their new values, so that a restarted proxy finishes the writes and answers the client
-- instead of running the transaction again over the values it wrote.
CREATE TABLE journal_commits (
    proxy TEXT NOT NULL,
    transaction_id TEXT NOT NULL,
    -- A JournaledCommit, protobuf.
    outcome BLOB NOT NULL,
    PRIMARY KEY (proxy, transaction_id)
);
