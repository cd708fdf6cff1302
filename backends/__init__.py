"""Built-in backend adapters.  They register through the same entry points as plugins."""
