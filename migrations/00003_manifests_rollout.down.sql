DROP TABLE rollout_kill_switches;
DROP TABLE gate_verdicts;
DROP TABLE workflow_rollouts;
DROP TABLE manifest_probes;
DROP TABLE manifests;
