-- The edges of each recorded graph, so that a graph's page can draw which results crossed
-- servers. Deleted with their graph (by the metaserver's pruning).
CREATE TABLE graph_edges (
    graph_id INTEGER NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
    from_task INTEGER NOT NULL,
    to_task INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
CREATE INDEX graph_edges_by_graph ON graph_edges (graph_id);
