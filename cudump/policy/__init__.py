"""What to do at a launch: rules and patterns, breakpoints, the launch trace, and the
snapshot, digest, NaN-scan and capture policies that plan the shim's copies."""
