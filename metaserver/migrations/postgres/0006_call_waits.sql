-- The rest of a task's server-side account (CallTiming): the seconds its inputs took to
-- fetch from storage and other servers, and the seconds it waited for the gang table's
-- admission before computing. NULL until the proxy reports the graph's end. With the
-- compute and stopped times, they say where a call's time went on a loaded grid.
ALTER TABLE placements ADD COLUMN fetch_seconds DOUBLE PRECISION;
ALTER TABLE placements ADD COLUMN queue_seconds DOUBLE PRECISION;
