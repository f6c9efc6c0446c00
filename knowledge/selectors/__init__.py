"""Reads of knowledge, one module per room: ``search`` (the search's hot path), ``api`` (the API's
resources, shared with the console), ``console_pages`` and ``graph_pages`` (the console's)."""
