"""The text rules both apps share: what one step of a solution is (``splitting``), what
final answer it states (``extraction``), and the reading of math in prose those rest on
(``notation``, ``claims``).

Plain Python: nothing here imports Django, torch or either app, so labeling's imports,
the step generator and the grader's spawned processes all read text the same way.
"""
