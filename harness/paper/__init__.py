"""Paper tables: their specs, the run planner and its cost estimate, the verdicts, the reproduce command."""
