"""Commands and tooling around the product (grebe dlq, ingest, topics...), apart from it."""
