-- 0023_delivery_error_staff_only: an agent login reads its sessions' deliveries, but no
-- longer their last_error as stored: the warning of a mail that some recipients refused
-- names the channel's recipients (who has it, who was refused, the server's answer
-- quoting the address), which are staff's to read. The agent's SELECT on the table
-- becomes one of its other columns (grants.sql grants them); the view
-- undolog.notification_deliveries shows it last_error through
-- undolog.delivery_last_error, each address as '…'.
REVOKE SELECT ON undolog.undolog_notification_deliveries FROM undolog_agent;
