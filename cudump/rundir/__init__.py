"""The run directory: its file layout, the typed records written there (manifest, summary,
timeline), the images of buffers, and reading a run back."""
