"""Self-improvement: failure diagnosis (oracle retriever, decision tree) on top of the harness."""
