-- The resource DB of the metaserver paper: servers and their routines, load and network samples, the
-- graphs scheduled and their placements. Times are Unix seconds (REAL). Written in SQL that
-- SQLite and PostgreSQL both accept.

CREATE TABLE servers (
    id INTEGER PRIMARY KEY,
    address TEXT NOT NULL UNIQUE,
    cpus INTEGER NOT NULL,
    processors INTEGER NOT NULL,
    memory_bytes INTEGER NOT NULL,
    mflops REAL NOT NULL,
    benchmark_n INTEGER NOT NULL,
    bulk_address TEXT NOT NULL,
    registered_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL,
    -- 'up' or 'down', as last decided by the metaserver.
    state TEXT NOT NULL
);

-- One row per routine a server registered; the descriptor is the protobuf
-- ninf.v1.FunctionInterface.
CREATE TABLE routines (
    server_id INTEGER NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    module TEXT NOT NULL,
    name TEXT NOT NULL,
    descriptor BLOB NOT NULL,
    PRIMARY KEY (server_id, name)
);

CREATE TABLE load_samples (
    server_id INTEGER NOT NULL REFERENCES servers (id) ON DELETE CASCADE,
    time REAL NOT NULL,
    -- Running plus queued jobs: the predictor's load.
    load REAL NOT NULL,
    load_average REAL NOT NULL,
    free_memory_bytes INTEGER NOT NULL,
    stored_bytes INTEGER NOT NULL
);
CREATE INDEX load_samples_by_server ON load_samples (server_id, time);

-- `from_location` / `to_location` are server addresses or 'client' (a proxy's site).
CREATE TABLE network_samples (
    from_location TEXT NOT NULL,
    to_location TEXT NOT NULL,
    throughput REAL NOT NULL,
    latency REAL NOT NULL,
    time REAL NOT NULL
);
CREATE INDEX network_samples_by_path ON network_samples (from_location, to_location, time);

CREATE TABLE graphs (
    id INTEGER PRIMARY KEY,
    label TEXT NOT NULL,
    proxy TEXT NOT NULL,
    scheduler TEXT NOT NULL,
    predictor TEXT NOT NULL,
    tasks INTEGER NOT NULL,
    edges INTEGER NOT NULL,
    created REAL NOT NULL,
    predicted_makespan REAL NOT NULL,
    inter_server_ratio REAL NOT NULL,
    -- NULL while running.
    actual_makespan REAL,
    -- 'running', 'done' or 'failed'.
    state TEXT NOT NULL,
    error TEXT NOT NULL
);

-- Placements made, and what actually happened (times relative to the graph's start).
CREATE TABLE placements (
    graph_id INTEGER NOT NULL REFERENCES graphs (id) ON DELETE CASCADE,
    task INTEGER NOT NULL,
    label TEXT NOT NULL,
    function TEXT NOT NULL,
    server_address TEXT NOT NULL,
    processors INTEGER NOT NULL,
    predicted_start REAL NOT NULL,
    predicted_finish REAL NOT NULL,
    actual_start REAL,
    actual_finish REAL,
    compute_seconds REAL,
    PRIMARY KEY (graph_id, task)
);
