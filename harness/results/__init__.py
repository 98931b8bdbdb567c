"""Records and what is made of them: the record store, the records-to-table layer, leaderboards,
reports, comparisons, margins."""
