DROP TABLE IF EXISTS rollout_shadow_comparisons;
