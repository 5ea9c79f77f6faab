"""Output: what leaves a run -> files and words (ArviZ data, Stan CSV, convergence, comparison, progress on stderr).

Takes: a run's released result (``run_result.RunResult``), public metadata and the privacy report; or finished fits.
Gives: InferenceData / DataTree with privacy attrs, Stan CSV, convergence verdicts, comparison tables, safe file writes.
"""
