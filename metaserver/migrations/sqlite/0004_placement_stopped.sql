-- The part of a task's compute time its gang job stood stopped behind other jobs' slots
-- (CallTiming.stopped_seconds): NULL until the proxy reports the graph's end.
ALTER TABLE placements ADD COLUMN stopped_seconds REAL;
