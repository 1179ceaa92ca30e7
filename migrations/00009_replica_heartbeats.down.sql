ALTER TABLE transition_violations DROP COLUMN detail, DROP COLUMN kind;
DROP TABLE watcher_replicas;
