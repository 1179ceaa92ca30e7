-- Sign-in hardening: a printed (generated) password must be changed at the first sign-in, and
-- the owner of an account learns about failed sign-ins to it at the next successful one.
ALTER TABLE accounts
    ADD COLUMN must_change_password  boolean     NOT NULL DEFAULT false,
    ADD COLUMN failed_signins        integer     NOT NULL DEFAULT 0,
    ADD COLUMN last_failed_signin_at timestamptz,
    ADD COLUMN last_failed_signin_from text;

-- A session opened with a password that must be changed may only change it.
ALTER TABLE sessions
    ADD COLUMN password_change_required boolean NOT NULL DEFAULT false;
