DROP TABLE audit_log;
DROP FUNCTION audit_log_refuse_change();
DROP TABLE signin_throttle;
DROP TABLE api_tokens;
DROP TABLE sessions;
DROP TABLE accounts;
