"""Command logic behind the grebe CLI: tooling apart from the product."""
