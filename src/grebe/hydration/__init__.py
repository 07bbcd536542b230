"""Hydration by id: fill a payload's post, author, parent, root and the author's recent
posts from a post table before plans run (docs/hydration.md)."""
