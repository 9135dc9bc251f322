"""Generator of synthetic profiling roots with planted faults and ground truth. Not built yet: see issue 3."""
