-- 0017_payload_bytes_unless_refused: undolog.payload_text_bytes(jsonb) is renamed
-- undolog.payload_bytes_unless_refused(jsonb), the same body under a name that says it
-- answers NULL for a refused payload (too deep, a number no double holds, certainly over
-- the limit) as well as the text's length. The old name goes; its source applies the new
-- one in the same migrate, and payload_fits and check_payload, applied again from theirs,
-- call it.
DROP FUNCTION IF EXISTS undolog.payload_text_bytes(jsonb);
