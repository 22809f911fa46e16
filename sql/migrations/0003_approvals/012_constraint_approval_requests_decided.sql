-- A request is pending with no decision, or decided with a time and a login; a human
-- decision (approved, rejected) always names who decided. 'expired' may lack decided_by:
-- then the engine expired it (expire_approvals), no person.
ALTER TABLE undolog.undolog_approval_requests
ADD CONSTRAINT undolog_approval_requests_decision_check CHECK (
    CASE state
        WHEN 'pending'
            THEN
                decided_at IS NULL AND decided_by IS NULL AND reason IS NULL
                AND decided_role IS NULL
        WHEN 'expired' THEN decided_at IS NOT NULL AND decided_role IS NOT NULL
        ELSE
            decided_at IS NOT NULL AND decided_role IS NOT NULL
            AND decided_by IS NOT NULL AND decided_by ~ '\S'
    END
);
