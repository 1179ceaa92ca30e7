-- A question keeps its own words: the requested schema's title and description, and a bounded
-- copy of the schema as the server sent it (choices, rules, defaults). Never an answer.
ALTER TABLE pending_inputs
    ADD COLUMN title            text  NOT NULL DEFAULT '',
    ADD COLUMN description      text  NOT NULL DEFAULT '',
    ADD COLUMN requested_schema jsonb CHECK (octet_length(requested_schema::text) <= 262144);
