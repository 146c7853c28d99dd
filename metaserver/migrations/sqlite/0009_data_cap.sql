-- Data caps (docs/data.md, "Memory"): when each handle was last used, so that replicas are
-- evicted least recently used first, and each server's cap on the data it keeps.
ALTER TABLE data_handles ADD COLUMN used_at REAL NOT NULL DEFAULT 0;
ALTER TABLE servers ADD COLUMN data_cap_bytes INTEGER NOT NULL DEFAULT 0;
