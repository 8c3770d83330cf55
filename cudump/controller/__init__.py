"""The controller: starts the target under the shim, serves one connection per process, keeps
what it knows of each process, and holds launches stopped at breakpoints."""
