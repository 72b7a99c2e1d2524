"""Models the runtime can build by itself (no download): the embedded tiny model."""
