-- Samples are only ever read and deleted by time (a restarted metaserver's registry, the
-- upkeep's pruning); no query reads a path's series or a server's by its columns. The
-- index on (from_location, to_location, time) put each new network sample at a random
-- place in a large tree, so that every commit touched pages all over it as the table grew;
-- an index on time alone takes each new row at its end, and lets pruning and the registry's
-- restore read a range instead of the whole table.
DROP INDEX network_samples_by_path;
CREATE INDEX network_samples_by_time ON network_samples (time);
CREATE INDEX load_samples_by_time ON load_samples (time);
