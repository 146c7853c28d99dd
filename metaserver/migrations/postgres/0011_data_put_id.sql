-- Each handle's put as its client named it (DataSpec.put_id): a put sent again under the same
-- name replaces what its first try made (docs/data.md, "Faults").
ALTER TABLE data_handles ADD COLUMN put_id TEXT NOT NULL DEFAULT '';
CREATE INDEX data_handles_put ON data_handles (owner, put_id);
