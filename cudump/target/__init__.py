"""Code that runs inside the traced Python program, loaded by cudump's sitecustomize
(site/sitecustomize.py, first on the program's PYTHONPATH under `cudump --layers`).

It tells the shim, through the calls the shim exports (`cudump_scope_push`, `_pop`, `_step`),
which PyTorch module's forward or backward is running on each thread and which training
step it is, so that every launch names its layer and step. It runs in the user's process:
it imports nothing of cudump outside this folder (the program's Python may not even have
cudump installed: the sitecustomize loads this folder by its path, as `_cudump_target`),
never imports torch itself, installs nothing where the shim is absent, and never raises
into the program (a failure is one "cudump: " line on stderr, and the hooks go off).
"""

import os

# The folder the controller puts first on the target's PYTHONPATH.
SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")
