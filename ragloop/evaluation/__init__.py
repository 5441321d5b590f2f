"""Offline evaluation: typed loaders for the shared evaluation sets (`datasets`) and ranking
metrics (`metrics`). The benchmarks and the evaluation harness are built on these two modules."""
