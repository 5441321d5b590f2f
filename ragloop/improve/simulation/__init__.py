"""The simulation that proves the self-improving loop (issue 14): replayed traffic through the real
service on a compressed clock, measured on a held-out part it never sees (`ragloop improve simulate`,
`benchmarks/self_improvement.py`). `split` is its fixed traffic / held-out split. Above `evaluation`
(its runner, metrics and statistics) and the loop's packages; it drives the service only as
processes and over HTTP, never by importing it.
"""
