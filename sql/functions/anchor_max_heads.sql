-- undolog.anchor_max_heads: the most session heads one anchor records (10,000: some
-- 1.3 MB of jsonb). undolog.write_anchor writes as many anchors as the heads that moved
-- need. One anchor of every moved head had no bound: any agent login moves heads at will
-- (begin_session alone links a session's first row; one statement of generate_series
-- began 5,500 sessions a second), and past some 2.1 million of them the anchor's jsonb
-- went over PostgreSQL's 256 MB (54000 "total size of jsonb object elements exceeds
-- the maximum"): write_anchor failed, and maintain_partitions, which calls it, with it,
-- on every run from then on (no month created or dropped, nothing anchored).
CREATE OR REPLACE FUNCTION undolog.anchor_max_heads()
RETURNS integer
LANGUAGE sql
IMMUTABLE
PARALLEL SAFE
AS $$
    SELECT 10000
$$;

REVOKE ALL ON FUNCTION undolog.anchor_max_heads() FROM public;
