"""A course's tools: many submissions (`batch`, `shards`), re-grades that redo only what changed
(`regrade`), the item analysis and merge (`report`), the student handout (`handout`) and the Gradescope
bundle (`bundle`). Imports every layer below; only `cs_basics.cli` imports it.
"""
