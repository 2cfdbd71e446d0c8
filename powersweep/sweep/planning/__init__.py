"""Which caps to measure: the default cap grid and clamping (``caps``), and the adaptive
coarse-to-fine planner (``strategy``). May import ``sweep.gpu`` types and ``powersweep.analysis``
(the planner asks the analysis where the answer is decided).
"""
