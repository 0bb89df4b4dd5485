"""Building blocks of benchmarks/run.py: environment, processes, load, reports."""
