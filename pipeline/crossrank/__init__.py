"""cross_rank: collectives matched across ranks, clock offsets, and step / layer alignment."""
