"""leakcollect: samples GPU hosts and writes traces to a bucket.

This package must stay light: it imports pyarrow (and, in one module only,
pynvml), never duckdb, polars or jinja2.
"""

__version__ = "0.1.0"
