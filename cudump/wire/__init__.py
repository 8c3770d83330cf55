"""The boundary between the shim (libcudump.so, in the target) and the controller: the wire
protocol, the shared memory of each target process, and the threads reading its rings."""
