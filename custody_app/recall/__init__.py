"""Recall over the facts believed now: the lexical (FTS5) and vector (sqlite-vec) indexes kept
equal to the believed facts, the embedders, the k-means cells of a large vector index, hybrid
search and salience.

Owns: index (the `RecallIndex` the core keeps in step), search, salience, cells, embedders,
text. May import: `domain`, `keys` and `store`. It never imports the core: the core hands it the
file, the key ring and the policy, and calls it after projecting each event.
"""
