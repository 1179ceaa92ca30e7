DROP TABLE operation_attempts;
