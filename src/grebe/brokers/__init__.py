"""Brokers, one module per real system: local (embedded durable log), kafka, rabbitmq."""
