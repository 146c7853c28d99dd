-- Each server's same-host socket (ServerInfo.bulk_local, an abstract Unix socket name):
-- kept so that a metaserver that restores its registry from here still tells proxies on
-- the server's host the socket before the server registers again. Without it, their calls
-- took the TCP bulk port until then. Empty when the server has none.
ALTER TABLE servers ADD COLUMN bulk_local TEXT NOT NULL DEFAULT '';
