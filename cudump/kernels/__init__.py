"""What a kernel's launch means: demangled signatures, argument values, element types,
geometry and extents of the buffers its pointers name, host symbols."""
