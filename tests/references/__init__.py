"""Independent references for the tests: event simulators, CTMCs, stored exact values."""
