DROP TABLE policy_versions;
