"""What the benchmarks share: their results as data (``results``) and the page rendered from them (``report``)."""
