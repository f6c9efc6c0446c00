"""Reads of knowledge, one module per room: ``search`` (the search's hot path), ``api`` (the API's
resources, shared with the console), ``console_pages`` (the console's; the graph's pages read ``graph.selectors``)."""
