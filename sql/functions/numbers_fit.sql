-- undolog.numbers_fit: whether every JSON number in a jsonb value is one a finite IEEE
-- double holds: zero, or a magnitude from 4.9406564584124654e-324 (the smallest positive
-- subnormal, 2^-1074, to 17 digits, rounded down) to 1.7976931348623158e308 (the largest
-- finite double, to 17 digits, rounded up). Every double is within (its shortest decimal
-- too), and every number within reads, in Python, JavaScript or any IEEE parser, as a
-- finite double, non-zero when it is: what is refused would read as infinity or as 0.
-- Such a number is a few bytes as jsonb but can print as 131,072 digits (1e131071): a
-- payload of them costs seconds and gigabytes to print, and Python's json refuses an
-- integer of more than 4,300 digits, so one stored breaks every reader of its row.
-- Integers are not held to the signature's ±(2^53-1): a result may carry a 64-bit id,
-- which JSON carries exactly and Python reads back exactly; the binding refuses what it
-- cannot sign before sending it.
-- The walk compares numbers as they are stored (numeric): nothing is printed. NULL for a
-- NULL value. The walk recurses every level: callers bound the depth first (a value of
-- under 512 bytes of jsonb cannot nest 65 levels; undolog.check_payload walks to level 64
-- before it calls this).
-- STABLE, and the _tz form of jsonb_path_exists (the same answer without datetimes), so
-- that the planner never runs the walk on a constant argument while it folds constants:
-- payload_fits('...'::jsonb) would walk a value of any size or depth there, whatever the
-- pg_column_size guard in front of the call says (a 12,000-deep value: 54001).
CREATE OR REPLACE FUNCTION undolog.numbers_fit(p_value jsonb)
RETURNS boolean
LANGUAGE sql
STABLE
PARALLEL SAFE
AS $$
    SELECT NOT pg_catalog.jsonb_path_exists_tz(
        p_value,
        'strict $.** ? (@.type() == "number"
                        && !(@ <= 1.7976931348623158e308 && @ >= -1.7976931348623158e308
                             && (@ >= 4.9406564584124654e-324 || @ <= -4.9406564584124654e-324
                                 || @ == 0)))')
$$;

REVOKE ALL ON FUNCTION undolog.numbers_fit(jsonb) FROM public;
