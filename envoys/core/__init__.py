"""The value machinery: standard values, their layouts and locations, pinning, and the errors they raise."""
