-- Issue 11 (write less per call, asynchronous result records) and issue 10, point 5 (a
-- result that arrives after its compensation).

-- commit and fail take p_async (DEFAULT false) and answer text; finish_execution answers
-- text: a changed argument list or return type is a new function, so the old ones go
-- (their files define the new ones; the two-argument call forms still resolve).
DROP FUNCTION IF EXISTS undolog.commit(uuid, jsonb);
DROP FUNCTION IF EXISTS undolog.fail(uuid, text);
DROP FUNCTION IF EXISTS undolog.finish_execution(uuid, text, jsonb, text);

-- One index fewer on every intercept: nothing reads undo entries by (session_id,
-- stack_position) but the walk and recover, which ask for unfinished entries only and
-- use undolog_undo_stack_unfinished_idx; stack_position is an identity, unique without
-- an index.
DROP INDEX undolog.undolog_undo_stack_position_key;

-- undolog:after-repeatables
-- Time-ordered ids (undolog.uuid_v7, a repeatable function) for the rows intercept
-- inserts, so that their index entries append at the right edge.
ALTER TABLE undolog.undolog_undo_stack
ALTER COLUMN undo_id SET DEFAULT undolog.uuid_v7();
ALTER TABLE undolog.undolog_approval_requests
ALTER COLUMN approval_id SET DEFAULT undolog.uuid_v7();
