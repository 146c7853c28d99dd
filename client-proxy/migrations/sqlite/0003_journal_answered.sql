-- A transaction that wrote data handles stays after it was answered, for a while
-- (`answer_keep_seconds`): a client whose reply was lost sends it again and is answered
-- from its commit instead of running it over the values it wrote. NULL: not answered yet.
ALTER TABLE journal_transactions ADD COLUMN answered_ms BIGINT;
