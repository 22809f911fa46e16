-- undolog.advisory_key: the key of one of the engine's advisory locks, for a kind of lock
-- ('session', 'signature', 'pending_approvals') and what it locks (a session's id, a
-- call's signature, a login): the first 64 bits of sha256(kind || ':' || value).
-- Some of those values are an agent's own choice: the session ids it begins and the
-- signatures it sends, checked for their form only (the engine cannot compute BLAKE3).
-- A key read from them directly would let an agent aim at any key and hold it in an open
-- transaction: another login's lock, the migrate lock. Through SHA-256 it cannot aim
-- (2^64 tries for one given key), and each kind has keys of its own. About 1 us a key.
-- SQL without a SET clause, inlined into its callers' expressions (about 15 us a call
-- when it is not). STABLE, as convert_to is: an IMMUTABLE function holding a STABLE one
-- is never inlined, so its callers are STABLE too.
CREATE OR REPLACE FUNCTION undolog.advisory_key(p_kind text, p_value text)
RETURNS bigint
LANGUAGE sql
STABLE
STRICT
PARALLEL SAFE
AS $$
    SELECT ('x' || pg_catalog.encode(
        pg_catalog.substr(
            pg_catalog.sha256(pg_catalog.convert_to(p_kind || ':' || p_value, 'UTF8')), 1, 8
        ),
        'hex'
    ))::bit(64)::bigint
$$;

REVOKE ALL ON FUNCTION undolog.advisory_key(text, text) FROM public;
