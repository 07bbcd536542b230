"""grebe: content understanding of social posts at stream scale."""

__version__ = "0.1.0"
