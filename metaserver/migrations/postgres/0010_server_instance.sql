-- Each server process's instance (ServerInfo.instance): a registration under another one is
-- a restart, whose storage is empty (docs/data.md, "Faults").
ALTER TABLE servers ADD COLUMN instance TEXT NOT NULL DEFAULT '';
