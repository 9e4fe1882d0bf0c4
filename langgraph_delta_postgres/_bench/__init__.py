"""Internals of ``langgraph-delta-pg bench`` (see :mod:`langgraph_delta_postgres.bench`)."""
