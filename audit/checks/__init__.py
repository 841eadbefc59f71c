"""The audit's checks: each reads the audit context and returns a frozen result for the gates."""
