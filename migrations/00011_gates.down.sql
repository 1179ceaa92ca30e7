DROP TABLE gate_queue;
DROP TABLE gate_cases;
DROP TABLE gate_runs;
