"""A generation of phase-2 work: the durable pipeline that trains, scores, grades and
selects, the reconciler that keeps it moving, the workers' pulse, and its report."""
