"""Graph retrieval: ``bench.graph.multihop`` (recall on the multi-hop set), ``.latency`` (on an evaluation KB),
``.scale`` (the graph leg and communities at 100k chunks), ``.entity_sample`` (entities to judge by hand)."""
