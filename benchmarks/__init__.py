"""Load harness comparing pyserver with peer servers (see docs/benchmarks.md)."""
