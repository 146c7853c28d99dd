-- The proxy's id for the schedule request that placed a graph: a request asked again of
-- the next metaserver after a fail-over supersedes the graph the first one recorded.
ALTER TABLE graphs ADD COLUMN request_id TEXT NOT NULL DEFAULT '';
CREATE INDEX graphs_by_request ON graphs (proxy, request_id);
