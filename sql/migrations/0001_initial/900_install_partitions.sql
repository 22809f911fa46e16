-- The current and the next month exist from the moment of install.
SELECT undolog.ensure_partitions(1);
