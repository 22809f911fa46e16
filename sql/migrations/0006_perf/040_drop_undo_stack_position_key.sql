-- One index fewer on every intercept: nothing reads undo entries by (session_id,
-- stack_position) except the walk and recover, which ask for unfinished entries only and
-- use undolog_undo_stack_unfinished_idx; stack_position is an identity, unique without an
-- index. The undo stack keeps its primary key, undo_key, effect_key, executed_at_idx and
-- unfinished_idx.
DROP INDEX undolog.undolog_undo_stack_position_key;
