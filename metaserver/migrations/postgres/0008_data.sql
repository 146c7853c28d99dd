-- Data kept on the grid (docs/data.md): each handle, its owner (the client's identity at
-- its proxy), its spec as given (the protobuf ninf.v1.DataSpec) and its lease; and where
-- its copies are. A handle outlives its proxy and a fail-over to another metaserver.
CREATE TABLE data_handles (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    spec BYTEA NOT NULL,
    lease_until DOUBLE PRECISION NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX data_handles_owner ON data_handles (owner);

CREATE TABLE data_copies (
    handle TEXT NOT NULL,
    server TEXT NOT NULL,
    object_id TEXT NOT NULL,
    PRIMARY KEY (handle, server)
);
