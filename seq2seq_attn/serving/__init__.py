"""Serving: trained models over HTTP (OpenNMT-py's REST routes, a `/v1` API, a page showing attention),
hosted under ids, searched in micro-batches."""
