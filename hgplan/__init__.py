"""hgplan: plan LLM training on heterogeneous, geo-distributed GPU fleets."""

__version__ = "0.1.0"
