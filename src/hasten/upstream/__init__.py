"""Calling upstreams: the deployment race (hedges, failover, retries) and the one network seam."""
