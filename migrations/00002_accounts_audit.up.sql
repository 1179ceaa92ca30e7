-- Console accounts, their server-side sessions, API tokens for applications, sign-in throttling
-- and the append-only audit log.

-- An account is a person who signs in to the console. role is one of viewer, operator, support,
-- admin; the tenant scope is either every tenant (all_tenants) or the listed tenants.
CREATE TABLE accounts (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email          text        NOT NULL CHECK (email <> ''),
    role           text        NOT NULL CHECK (role IN ('viewer', 'operator', 'support', 'admin')),
    all_tenants    boolean     NOT NULL DEFAULT false,
    tenants        text[]      NOT NULL DEFAULT '{}',
    -- password_hash is an argon2id PHC string; NULL means the account cannot sign in with a
    -- password (trusted-header deployments).
    password_hash  text,
    disabled_at    timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CHECK (all_tenants OR cardinality(tenants) > 0)
);
CREATE UNIQUE INDEX accounts_email_key ON accounts (lower(email));

-- A session is a signed-in browser. Only the SHA-256 of the cookie value is stored.
CREATE TABLE sessions (
    id_hash      bytea       PRIMARY KEY,
    account_id   bigint      NOT NULL REFERENCES accounts (id) ON DELETE CASCADE,
    csrf_token   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX sessions_account_idx ON sessions (account_id);
CREATE INDEX sessions_expires_idx ON sessions (expires_at);

-- An API token lets an application call /api/v1 for the tenants it is bound to. Only the
-- SHA-256 of the secret is stored; prefix is the public part shown in lists.
CREATE TABLE api_tokens (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name         text        NOT NULL CHECK (name <> ''),
    prefix       text        NOT NULL UNIQUE,
    secret_hash  bytea       NOT NULL,
    tenants      text[]      NOT NULL CHECK (cardinality(tenants) > 0),
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- Failed sign-ins by key ("email:…" or "addr:…"), whether or not the account exists, so that
-- lockout says nothing about which accounts exist.
CREATE TABLE signin_throttle (
    key          text        PRIMARY KEY,
    failures     integer     NOT NULL DEFAULT 0,
    window_start timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz
);

-- The audit log: who did what to what, when, with which role for which tenant. Rows are written
-- in the same transaction as the change they describe and are never changed or removed.
CREATE TABLE audit_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor      text        NOT NULL,
    actor_kind text        NOT NULL CHECK (actor_kind IN ('account', 'token', 'cli', 'system')),
    role       text        NOT NULL DEFAULT '',
    tenant     text        NOT NULL DEFAULT '',
    action     text        NOT NULL CHECK (action <> ''),
    target     text        NOT NULL DEFAULT '',
    before     jsonb,
    after      jsonb,
    reason     text        NOT NULL DEFAULT '',
    request_id text        NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_actor_idx  ON audit_log (actor, id);
CREATE INDEX audit_log_action_idx ON audit_log (action, id);
CREATE INDEX audit_log_tenant_idx ON audit_log (tenant, id);

CREATE FUNCTION audit_log_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_refuse_change();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_refuse_change();
