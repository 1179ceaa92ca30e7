ALTER TABLE operations DROP COLUMN IF EXISTS route_context;
DROP TABLE IF EXISTS rollout_shadow_comparisons;
