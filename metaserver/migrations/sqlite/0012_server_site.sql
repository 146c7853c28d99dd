-- The site a server's configuration names (ServerInfo.site; empty: placed by its address),
-- whose paths its servers measure among themselves (docs/metaserver.md, "Sites").
ALTER TABLE servers ADD COLUMN site TEXT NOT NULL DEFAULT '';
