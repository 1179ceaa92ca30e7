ALTER TABLE sessions DROP COLUMN password_change_required;
ALTER TABLE accounts
    DROP COLUMN last_failed_signin_from,
    DROP COLUMN last_failed_signin_at,
    DROP COLUMN failed_signins,
    DROP COLUMN must_change_password;
