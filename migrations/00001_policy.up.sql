-- Every policy file the console has loaded, so that a decision can always be traced to the
-- reviewed policy that was in force when it was made.
CREATE TABLE policy_versions (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sha256      text        NOT NULL UNIQUE,
    source      text        NOT NULL,
    body        jsonb       NOT NULL,
    first_loaded_at timestamptz NOT NULL DEFAULT now(),
    last_loaded_at  timestamptz NOT NULL DEFAULT now()
);
