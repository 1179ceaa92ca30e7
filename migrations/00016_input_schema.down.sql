ALTER TABLE pending_inputs
    DROP COLUMN requested_schema,
    DROP COLUMN description,
    DROP COLUMN title;
