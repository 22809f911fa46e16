-- 0014_signature_in_undo_stack: the exactly-once key of a journaled call moves from the
-- signature registry into the call's undo entry (Journal v2, issue 23: one row and three
-- index entries fewer per new call). Every journaled call pushes exactly one undo entry
-- (its compensation, or an IRREVERSIBLE call's barrier) in intercept's transaction, and
-- the registry's other two keys, (effect_id, session_id) and executed_at, were already
-- the undo stack's: the registry was a second copy of the undo stack's key columns plus
-- the signature. The unique key (session_id, call_signature) is now the undo stack's,
-- and intercept's ON CONFLICT DO NOTHING is its insert of the entry.
-- The registry's rows are copied into their entries, checked complete, and the table
-- goes. Its append-only guard becomes the undo stack guard's (an entry's signature is
-- part of its identity), its staff-only policy the undo stack's (an agent reads its own
-- sessions' entries, signatures included: the same facts it reads in the effect log).

ALTER TABLE undolog.undolog_undo_stack ADD COLUMN call_signature text;

-- The guard stamps updated_at on every UPDATE, and the copy is not an event of the entry:
-- the trigger goes, and migrate creates it again from its source (a trigger a migration
-- dropped is re-applied). A new database has no trigger yet.
DROP TRIGGER IF EXISTS undolog_undo_stack_guard ON undolog.undolog_undo_stack;
UPDATE undolog.undolog_undo_stack AS u
SET call_signature = r.call_signature
FROM undolog.undolog_signature_registry AS r
WHERE r.effect_id = u.effect_id AND r.session_id = u.session_id;

-- Both tables were written together by intercept and pruned together by retention: a
-- row of one without the other is damage, and the upgrade stops to say so rather than
-- lose an exactly-once key.
DO $check$
DECLARE
    v_orphans bigint;
BEGIN
    SELECT count(*) INTO v_orphans
    FROM undolog.undolog_signature_registry AS r
    WHERE NOT EXISTS (SELECT FROM undolog.undolog_undo_stack AS u
                      WHERE u.effect_id = r.effect_id AND u.session_id = r.session_id);
    SELECT v_orphans + count(*) INTO v_orphans
    FROM undolog.undolog_undo_stack AS u WHERE u.call_signature IS NULL;
    IF v_orphans > 0 THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = pg_catalog.format('%s journaled call(s) have a signature without an '
                                        'undo entry, or an undo entry without a signature',
                                        v_orphans),
            HINT = 'Nothing was changed. Compare undolog_signature_registry with '
                   'undolog_undo_stack on (effect_id, session_id), then migrate again.';
    END IF;
END
$check$;

ALTER TABLE undolog.undolog_undo_stack ALTER COLUMN call_signature SET NOT NULL;

-- The exactly-once guard, per session (what the registry's primary key was).
CREATE UNIQUE INDEX undolog_undo_stack_signature_key
ON undolog.undolog_undo_stack (session_id, call_signature);

-- One index fewer on every intercept: the primary key (session_id, undo_id) and
-- undolog_undo_stack_undo_key (undo_id, session_id) indexed the same pair. An entry is
-- found by its undo id (the walk's claims) or by its session (the signature key above
-- leads with it), so the undo id's index becomes the primary key and the other goes.
-- It was also a second index leading with session_id, which a generic plan made while
-- the stack is nearly empty may take for a lookup by effect or by signature, and then
-- read every entry of a long session.
ALTER TABLE undolog.undolog_undo_stack DROP CONSTRAINT undolog_undo_stack_pkey;
ALTER TABLE undolog.undolog_undo_stack
ADD CONSTRAINT undolog_undo_stack_pkey PRIMARY KEY USING INDEX undolog_undo_stack_undo_key;

-- What read the registry is defined again by its repeatable source, on the undo stack.
DROP VIEW IF EXISTS undolog.metrics_calls;
DROP FUNCTION IF EXISTS undolog.locate_effect(uuid);
DROP TABLE undolog.undolog_signature_registry;
