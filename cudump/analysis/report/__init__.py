"""How comparisons and snapshot lists are shown: terminal text and the static HTML report.

Modules: formats (numbers), tables (aligned columns, the `cudump ls` rows), text (the file
and run diffs as terminal text), html_parts (the page's style, panels and metrics) and
html_page (HtmlReport).
"""
