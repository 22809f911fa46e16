-- undolog.chain_hash: one link of a history chain, sha256(p_prev || p_canonical as
-- UTF-8). The one definition of the hash: Python's undolog.chain.chain_hash computes the
-- same over the same bytes (tests/engine/test_hash_chain.py checks that they agree).
CREATE OR REPLACE FUNCTION undolog.chain_hash(p_prev bytea, p_canonical text)
RETURNS bytea
LANGUAGE sql
-- STABLE as convert_to is: a function declared more immutable than its body is not
-- inlined, and would run as a query of its own for every link.
STABLE
AS $$
    SELECT pg_catalog.sha256(p_prev || pg_catalog.convert_to(p_canonical, 'UTF8'))
$$;

REVOKE ALL ON FUNCTION undolog.chain_hash(bytea, text) FROM public;
