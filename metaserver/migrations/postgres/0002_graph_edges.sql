-- The edges of each recorded graph, so that a graph's page can draw which results crossed
-- servers. Deleted with their graph (by the metaserver's pruning).
CREATE TABLE graph_edges (
    graph_id BIGINT NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
    from_task BIGINT NOT NULL,
    to_task BIGINT NOT NULL,
    bytes BIGINT NOT NULL
);
CREATE INDEX graph_edges_by_graph ON graph_edges (graph_id);
