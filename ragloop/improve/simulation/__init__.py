"""The self-improvement simulation (issue 14); `split` is its fixed traffic / held-out split."""
