"""Run reproducibility records: hashes, environment snapshots and drift fingerprints."""
