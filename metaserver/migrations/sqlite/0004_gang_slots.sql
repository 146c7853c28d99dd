-- Each server's gang slot length (ServerInfo.quantum_seconds), which the predictor's slot
-- wait reads: kept so that a metaserver that restores its registry from here predicts it
-- before the server registers again. 0 when unknown.
ALTER TABLE servers ADD COLUMN quantum_seconds REAL NOT NULL DEFAULT 0;
-- The part of a task's compute time its gang job stood stopped behind other jobs' slots
-- (CallTiming.stopped_seconds): NULL until the proxy reports the graph's end.
ALTER TABLE placements ADD COLUMN stopped_seconds REAL;
