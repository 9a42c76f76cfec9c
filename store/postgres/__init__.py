"""The PostgreSQL backend: one module per statement group, mirroring `store/sqlite/`."""
