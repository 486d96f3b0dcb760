"""leakreport: analyses trace buckets with SQL rule packs."""

__version__ = "0.1.0"
