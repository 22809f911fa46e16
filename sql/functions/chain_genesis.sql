-- undolog.chain_genesis: the chain_prev of a session's first history row, and of the
-- first anchor: 32 zero bytes.
CREATE OR REPLACE FUNCTION undolog.chain_genesis()
RETURNS bytea
LANGUAGE sql
IMMUTABLE
AS $$
    SELECT '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea
$$;

REVOKE ALL ON FUNCTION undolog.chain_genesis() FROM public;
