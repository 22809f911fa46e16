-- undolog.session_state_estimates: each session state's share of the sessions table, as
-- the planner's statistics estimate it (pg_class.reltuples times the state's frequency
-- among pg_stats' most common values; as of the last ANALYZE or autovacuum). Counting a
-- million completed sessions exactly reads a million index entries; their volume only
-- needs an order of magnitude. A state too rare for the sample's most common values, or
-- a table never analyzed, estimates 0.
-- SECURITY DEFINER: pg_stats hides the statistics of a table whose row-level security
-- applies to the reader (its most common values could show rows the reader may not see),
-- which it does to every role but the owner. What it answers here is the seven state
-- names and a number each: nothing of any session.
CREATE OR REPLACE FUNCTION undolog.session_state_estimates()
RETURNS TABLE (state text, sessions bigint)
LANGUAGE sql
STABLE
SECURITY DEFINER
SET search_path = undolog, pg_temp
AS $$
    SELECT
        st.state,
        round(greatest(coalesce(c.reltuples, 0), 0)::numeric
              * coalesce(f.freq, 0)::numeric)::bigint
    FROM (VALUES ('active'), ('completed'), ('failed'), ('awaiting_approval'),
                 ('compensating'), ('compensated'), ('halted')) AS st (state)
    LEFT JOIN pg_catalog.pg_class AS c ON c.oid = 'undolog.undolog_sessions'::regclass
    LEFT JOIN (
        SELECT v.state, v.freq
        FROM pg_catalog.pg_stats AS ps,
            unnest(ps.most_common_vals::text::text[], ps.most_common_freqs) AS v (state, freq)
        WHERE ps.schemaname = 'undolog' AND ps.tablename = 'undolog_sessions'
          AND ps.attname = 'state' AND NOT ps.inherited
    ) AS f ON f.state = st.state
$$;

REVOKE ALL ON FUNCTION undolog.session_state_estimates() FROM public;
