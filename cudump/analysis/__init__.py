"""Offline tools over run directories: diff, the HTML report, bisect, replay and statistics."""
