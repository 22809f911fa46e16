-- undolog.approval_requests_guard: BEFORE INSERT OR UPDATE on undolog_approval_requests.
-- A request is born pending (with its deadline, see undolog.approval_timeout) and is
-- decided exactly once: pending -> approved | rejected | expired. Nothing else about it
-- ever changes, and a decided request is frozen, so the table is the immutable record of
-- who allowed or refused each irreversible call. Enforced here, for every code path,
-- including the owner's own UPDATEs; DELETE and TRUNCATE are refused outright.
CREATE OR REPLACE FUNCTION undolog.approval_requests_guard()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.state <> 'pending' THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL001',
                MESSAGE = pg_catalog.format('an approval request starts pending, not %s',
                                            NEW.state),
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        -- intercept does not set a deadline: the configured default applies.
        NEW.expires_at := coalesce(NEW.expires_at,
                                   undolog.utc_after(NEW.requested_at,
                                                     undolog.approval_timeout()));
        IF NEW.expires_at <= NEW.requested_at THEN
            RAISE EXCEPTION USING
                ERRCODE = 'UL008',
                MESSAGE = 'an approval request''s deadline must come after its request',
                HINT = 'The journal changes only through undolog''s functions, and none of them '
                       'asks for this: if one did, report it as a bug with the statement. Nothing '
                       'was changed.';
        END IF;
        RETURN NEW;
    END IF;

    IF NEW IS NOT DISTINCT FROM OLD THEN
        RETURN NEW;
    END IF;
    -- The links into the history chain are identity too: the decision's is written by
    -- undolog.chain_approval_requests, which fires after this guard, never by the UPDATE itself.
    IF (NEW.approval_id, NEW.session_id, NEW.effect_id, NEW.executed_at, NEW.requested_at,
        NEW.expires_at, NEW.chain_seq, NEW.chain_prev, NEW.chain_hash, NEW.decision_seq,
        NEW.decision_prev, NEW.decision_hash)
       IS DISTINCT FROM
       (OLD.approval_id, OLD.session_id, OLD.effect_id, OLD.executed_at, OLD.requested_at,
        OLD.expires_at, OLD.chain_seq, OLD.chain_prev, OLD.chain_hash, OLD.decision_seq,
        OLD.decision_prev, OLD.decision_hash) THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL011',
            MESSAGE = 'an approval request''s identity (id, session, effect, requested_at, '
                      'expires_at, chain links) cannot change',
            DETAIL = pg_catalog.format('approval %s', OLD.approval_id),
            HINT = 'The journal changes only through undolog''s functions, and none of them asks '
                   'for this: if one did, report it as a bug with the statement. Nothing was '
                   'changed.';
    END IF;
    IF OLD.state <> 'pending' THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL014',
            MESSAGE = pg_catalog.format('approval %s was already decided (%s)',
                                        OLD.approval_id, OLD.state),
            HINT = 'A decision is final; nothing was changed. Read it in the session''s timeline: '
                   'undolog sessions show ID.';
    END IF;
    IF NEW.state NOT IN ('approved', 'rejected', 'expired') THEN
        RAISE EXCEPTION USING
            ERRCODE = 'UL001',
            MESSAGE = pg_catalog.format('invalid approval transition %s -> %s',
                                        OLD.state, NEW.state),
            DETAIL = pg_catalog.format('approval %s', OLD.approval_id),
            HINT = 'The journal changes only through undolog''s functions, and none of them asks '
                   'for this: if one did, report it as a bug with the statement. Nothing was '
                   'changed.';
    END IF;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION undolog.approval_requests_guard() FROM public;
