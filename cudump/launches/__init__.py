"""The launch model: what is known of each target process (its functions, allocations and
launches, decoded from the shim's messages), the launch events, and a launch held at a
breakpoint. Below everything that speaks of launches; it needs only kernels/ and wire/."""
