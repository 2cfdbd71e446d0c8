"""The measurement protocol: how any operating point is measured, the same way on every axis.

:class:`~powersweep.sweep.measurement.point.PointMeasurer` measures one point (set and verify,
settle under load, the time-bounded load, the load mode's consistency checks, measured once more
if disturbed, ``suspect`` if still disturbed, rows); :mod:`.setup` warms up and prepares the load
at the first point; :mod:`.restorer` puts every setting back.

The reasoning: docs/reference.md, "powersweep.sweep.measurement".
"""
