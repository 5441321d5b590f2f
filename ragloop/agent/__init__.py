"""The self-correcting answer graph (LangGraph): condense, retrieve, grade (CRAG), refine,
rewrite, external search, generate, validate citations, critique loop, refuse; with a trace."""
