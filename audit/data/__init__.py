"""Table schema, loaders, claims and both-order contests (above errors and policy)."""
