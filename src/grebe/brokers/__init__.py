"""Brokers: each registers one backend in `<name>_backend.py` (registry.py finds them):
local (embedded durable log), kafka, rabbitmq, memory (in-process)."""
