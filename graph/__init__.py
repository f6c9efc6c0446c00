"""The knowledge graph as one domain: its extraction wiring, building, curators' rules, communities, the
walk that ranks passages by it, its reads, console pages and commands. It reads knowledge (passages,
versions, vocabulary) and the graph store (``knowledge.stores.graph_store``); retrieval reads it."""
