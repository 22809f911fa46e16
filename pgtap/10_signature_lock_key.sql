-- undolog.signature_lock_key(uuid, text) and undolog.session_lock_key(uuid, text): the
-- bigint advisory-lock keys of a call in its session and of a session, each
-- undolog.advisory_key of its kind: the first 64 bits of sha256(kind || ':' || value).
-- The values are the agent's choice, so a key is never read from them directly: a
-- signature whose first 16 hex digits spell another lock's key (the migrate lock's) does
-- not get that key. A call's key is its session's: the same signature in another session
-- (another login's, which knows it) has another key.
BEGIN;
SELECT plan(21);
\ir _helpers.psql

SELECT has_function('undolog', 'signature_lock_key', ARRAY['uuid', 'text'],
                    'undolog.signature_lock_key(uuid, text) exists');
SELECT hasnt_function('undolog', 'signature_lock_key', ARRAY['text'],
                      'the key of a signature alone is gone (migration 0018)');
SELECT function_returns('undolog', 'signature_lock_key', ARRAY['uuid', 'text'], 'bigint',
                        'it returns bigint');
SELECT volatility_is('undolog', 'signature_lock_key', ARRAY['uuid', 'text'], 'stable',
                     'it is STABLE (advisory_key: so that it is inlined)');
SELECT is_strict('undolog', 'signature_lock_key', ARRAY['uuid', 'text'], 'it is STRICT');
SELECT is(undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, NULL),
          NULL::bigint, 'NULL signature -> NULL key');
SELECT is(undolog.signature_lock_key(NULL, repeat('0', 64)), NULL::bigint,
          'NULL session -> NULL call key');
SELECT is(undolog.session_lock_key(NULL, 'a'), NULL::bigint, 'NULL session -> NULL key');

-- The definition, written out with PostgreSQL's own sha256.
SELECT is(undolog.advisory_key('signature', repeat('0', 64)),
          ('x' || left(encode(sha256(convert_to('signature:' || repeat('0', 64), 'UTF8')), 'hex'),
                       16))::bit(64)::bigint,
          'advisory_key is the first 64 bits of sha256(kind:value)');
SELECT is(undolog.advisory_key('signature', 'abc'),
          ('x' || left(encode(sha256('signature:abc'::bytea), 'hex'), 16))::bit(64)::bigint,
          '... for any text');

-- The formula, for a sample of real-looking signatures and sessions.
SELECT is_empty(
    $$SELECT s FROM (SELECT gen_random_uuid() AS u, pg_temp.sig('formula-' || i) AS s
                     FROM generate_series(1, 500) AS i) AS t
      WHERE undolog.signature_lock_key(u, s)
            IS DISTINCT FROM undolog.advisory_key('signature', u::text || ':' || s)$$,
    'signature_lock_key(id, sig) = advisory_key(''signature'', id:sig) for 500 calls'
);
SELECT is_empty(
    $$SELECT u FROM (SELECT gen_random_uuid() AS u FROM generate_series(1, 500)) AS t
      WHERE undolog.session_lock_key(u, 'ann')
            IS DISTINCT FROM undolog.advisory_key('session', u::text || ':ann')$$,
    'session_lock_key(id, owner) = advisory_key(''session'', id:owner) for 500 sessions'
);

-- No aiming: a signature spelling a key in its first 16 digits does not get that key.
SELECT isnt(undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '68e2b893c1f36800' || repeat('0', 48)),
            ('x' || '68e2b893c1f36800')::bit(64)::bigint,
            'a signature beginning with the migrate lock''s key in hex does not get it');
SELECT is_empty(
    $$SELECT s FROM (SELECT pg_temp.sig('aim-' || i) AS s FROM generate_series(1, 500) AS i) AS t
      WHERE undolog.signature_lock_key(gen_random_uuid(), s)
            = ('x' || left(s, 16))::bit(64)::bigint$$,
    'no key is the signature''s own first 64 bits (500 signatures)'
);
-- Each kind has keys of its own: the same text, two kinds, two keys.
SELECT isnt(undolog.advisory_key('signature', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11:ann'),
            undolog.session_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'ann'),
            'a signature equal to a session''s key text does not get the session''s key');
SELECT isnt(undolog.session_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'ann'),
            undolog.session_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'bob'),
            'a session''s key is its owner''s: another login naming it locks another key');
-- A call's key is its session's: another login that knows the signature (an approver
-- reads them) and sends it in a session of its own locks another key.
SELECT isnt(undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, pg_temp.sig('seen')),
            undolog.signature_lock_key('b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', pg_temp.sig('seen')),
            'the same signature in two sessions -> two keys');

-- Deterministic: same input, same key, in one statement and across calls.
SELECT is(undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, pg_temp.sig('det')),
          undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, pg_temp.sig('det')), 'same call -> same key');
SELECT is(
    (SELECT count(DISTINCT undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, pg_temp.sig('det')))
     FROM generate_series(1, 50)),
    1::bigint, 'same call -> one key over 50 calls'
);

-- Every digit counts: signatures differing only in their last digit get different keys.
SELECT isnt(undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '0123456789abcdef' || repeat('a', 48)),
            undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, '0123456789abcdef' || repeat('a', 47) || 'b'),
            'signatures differing only in their last digit get different keys');

-- Distinct signatures -> distinct keys, for a sample of 10 000.
SELECT is(
    (SELECT count(DISTINCT undolog.signature_lock_key('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid, pg_temp.sig('distinct-' || i)))
     FROM generate_series(1, 10000) AS i),
    10000::bigint, '10 000 distinct signatures -> 10 000 distinct keys'
);

SELECT * FROM finish();
ROLLBACK;
