"""The model: the API client with its tool loop, the usage ledger and the daily budgets."""
