-- undolog.write_anchor: append an anchor: the heads of the sessions whose history chain
-- moved since the previous anchor ({session_id: [seq, head hex]}), chained to that
-- anchor (hash = undolog.chain_hash(previous anchor's hash, its canonical record)).
-- Answers the anchor. The latest anchor's hash, kept where the database cannot rewrite
-- it (`undolog anchor export`), fixes every history row written before it: rewriting
-- one means rewriting its session's chain from there, which no longer reaches the head
-- the anchor recorded. Called by undolog.maintain_partitions and by operators.
-- An anchor records at most undolog.anchor_max_heads() heads, in session id order: when
-- more moved, the next anchors record the rest, each chained to the one before, and the
-- call answers a row for each (the last is the latest). With none moved it still writes
-- one, recording none. Any agent login moves heads (a new session links its first row),
-- and one anchor of them all went over jsonb's 256 MB past some 2.1 million.
-- Anchors are written one at a time, under the partition-maintenance lock (which
-- maintain_partitions already holds: no lock on any table stronger than a write); the
-- heads are read from one statement's snapshot, so a write not yet committed is in the
-- next call's anchor.
CREATE OR REPLACE FUNCTION undolog.write_anchor()
RETURNS TABLE (
    anchor_id bigint, written_at timestamptz, sessions integer, hash text, canonical text
)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
DECLARE
    v_id bigint;
    v_prev bytea;
    v_at timestamptz;
    v_heads jsonb;
    v_sessions integer;
    v_canonical text;
    v_hash bytea;
BEGIN
    PERFORM undolog.lock_partition_maintenance();
    SELECT a.anchor_id, a.anchor_hash INTO v_id, v_prev
    FROM undolog.undolog_chain_anchors AS a
    ORDER BY a.anchor_id DESC
    LIMIT 1;
    v_id := coalesce(v_id, 0);
    v_prev := coalesce(v_prev, undolog.chain_genesis());
    -- The heads that moved, read once (one snapshot for every anchor of this call), cut
    -- into parts of anchor_max_heads in session id order; part 0 is there with none.
    FOR v_heads, v_sessions IN
        WITH moved AS MATERIALIZED (
            SELECT h.session_id, h.seq, h.head,
                   (pg_catalog.row_number() OVER (ORDER BY h.session_id) - 1)
                   / undolog.anchor_max_heads() AS part
            FROM undolog.undolog_chain_heads AS h
            LEFT JOIN undolog.undolog_chain_anchored AS d ON d.session_id = h.session_id
            WHERE d.seq IS DISTINCT FROM h.seq
        )
        SELECT coalesce(pg_catalog.jsonb_object_agg(
                            m.session_id::text,
                            pg_catalog.jsonb_build_array(m.seq, pg_catalog.encode(m.head, 'hex')))
                        FILTER (WHERE m.session_id IS NOT NULL),
                        '{}'::jsonb),
               pg_catalog.count(m.session_id)
        FROM pg_catalog.generate_series(0, (SELECT coalesce(pg_catalog.max(x.part), 0)
                                            FROM moved AS x)) AS p (part)
        LEFT JOIN moved AS m ON m.part = p.part
        GROUP BY p.part
        ORDER BY p.part
    LOOP
        v_id := v_id + 1;
        v_at := pg_catalog.clock_timestamp();
        v_canonical := undolog.anchor_record(v_id, v_at, v_heads);
        v_hash := undolog.chain_hash(v_prev, v_canonical);
        INSERT INTO undolog.undolog_chain_anchors AS a
            (anchor_id, written_at, heads, prev, canonical, anchor_hash)
        VALUES (v_id, v_at, v_heads, v_prev, v_canonical, v_hash);
        INSERT INTO undolog.undolog_chain_anchored AS d (session_id, seq)
        SELECT x.key::uuid, (x.value ->> 0)::bigint
        FROM pg_catalog.jsonb_each(v_heads) AS x
        ON CONFLICT (session_id) DO UPDATE SET seq = excluded.seq;
        RETURN QUERY SELECT v_id, v_at, v_sessions, pg_catalog.encode(v_hash, 'hex'), v_canonical;
        v_prev := v_hash;
    END LOOP;
END
$$;

REVOKE ALL ON FUNCTION undolog.write_anchor() FROM public;
