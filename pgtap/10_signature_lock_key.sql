-- undolog.signature_lock_key(text): the bigint advisory-lock key of a call signature,
-- ('x' || left(sig, 16))::bit(64)::bigint (docs/design/signature.md: the
-- first 64 bits of the signature, after checking it is 64 hex digits, since a short
-- input would be silently padded).
BEGIN;
SELECT plan(16);
\ir _helpers.psql

SELECT has_function('undolog', 'signature_lock_key', ARRAY['text'],
                    'undolog.signature_lock_key(text) exists');
SELECT function_returns('undolog', 'signature_lock_key', ARRAY['text'], 'bigint',
                        'it returns bigint');
SELECT volatility_is('undolog', 'signature_lock_key', ARRAY['text'], 'immutable',
                     'it is IMMUTABLE');
SELECT is_strict('undolog', 'signature_lock_key', ARRAY['text'], 'it is STRICT');
SELECT is(undolog.signature_lock_key(NULL), NULL::bigint, 'NULL signature -> NULL key');

-- Known values, written out: the first 16 hex digits read as a signed 64-bit integer.
SELECT is(undolog.signature_lock_key(repeat('0', 64)), 0::bigint, 'all zeros -> 0');
SELECT is(undolog.signature_lock_key(repeat('f', 64)), -1::bigint, 'all f -> -1');
SELECT is(undolog.signature_lock_key('7fffffffffffffff' || repeat('0', 48)),
          9223372036854775807::bigint, '7fff... -> the largest bigint');
SELECT is(undolog.signature_lock_key('8000000000000000' || repeat('f', 48)),
          '-9223372036854775808'::bigint, '8000... -> the smallest bigint');
SELECT is(undolog.signature_lock_key('0123456789abcdef' || repeat('0', 48)),
          81985529216486895::bigint, '0123456789abcdef... -> 0x0123456789abcdef');

-- The formula of the contract, for a sample of real-looking signatures.
SELECT is_empty(
    $$SELECT s FROM (SELECT pg_temp.sig('formula-' || i) AS s FROM generate_series(1, 500) AS i) AS t
      WHERE undolog.signature_lock_key(s) IS DISTINCT FROM ('x' || left(s, 16))::bit(64)::bigint$$,
    'equals (''x'' || left(sig, 16))::bit(64)::bigint for 500 signatures'
);

-- Deterministic: same input, same key, in one statement and across calls.
SELECT is(undolog.signature_lock_key(pg_temp.sig('det')),
          undolog.signature_lock_key(pg_temp.sig('det')), 'same signature -> same key');
SELECT is(
    (SELECT count(DISTINCT undolog.signature_lock_key(pg_temp.sig('det'))) FROM generate_series(1, 50)),
    1::bigint, 'same signature -> one key over 50 calls'
);

-- Only the first 16 hex digits count: signatures that differ after them share a key
-- (the lock is a cheap filter; the undo stack's unique (session, signature) key decides identity).
SELECT is(undolog.signature_lock_key('0123456789abcdef' || repeat('a', 48)),
          undolog.signature_lock_key('0123456789abcdef' || repeat('b', 48)),
          'signatures differing only after digit 16 share a key');
SELECT isnt(undolog.signature_lock_key('0123456789abcdee' || repeat('a', 48)),
            undolog.signature_lock_key('0123456789abcdef' || repeat('a', 48)),
            'signatures differing in digit 16 get different keys');

-- Distinct signatures -> distinct keys, for a sample of 10 000.
SELECT is(
    (SELECT count(DISTINCT undolog.signature_lock_key(pg_temp.sig('distinct-' || i)))
     FROM generate_series(1, 10000) AS i),
    10000::bigint, '10 000 distinct signatures -> 10 000 distinct keys'
);

SELECT * FROM finish();
ROLLBACK;
