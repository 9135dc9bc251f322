"""summarize's mechanisms: bound labels, operator and communication tables, step time accounting,
rank rollups. Plain functions over DataFrames; the stage module wires them."""
