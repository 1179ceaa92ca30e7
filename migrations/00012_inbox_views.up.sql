-- When each account last opened the inbox of open questions: what is new since it looked.
CREATE TABLE inbox_views (
    account_id bigint      PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    seen_at    timestamptz NOT NULL
);
