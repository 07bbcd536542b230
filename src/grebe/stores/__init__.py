"""Annotation store adapters: sqlite (default), postgres, redis."""
