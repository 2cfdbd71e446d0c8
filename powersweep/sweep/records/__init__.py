"""What a sweep leaves on disk: the run directory writer, the restore journal, and file
ownership under sudo. May import ``sweep.gpu``, ``sweep.sampling`` types and the base modules.
"""
