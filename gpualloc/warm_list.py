"""The compiled functions gpualloc calls from Python, each with the argument
types of its calls, in the order gpualloc.warm's helpers compile them: those
a default run calls last first. Made by `python -m tests.helpers` (from the
repository's root, in a fresh process); tests/test_warm.py checks it."""

KERNELS = [
    ('gpualloc.policies.allocator.search', '_walk',
     'uint64[1C] int64 int64 int64[1C] float64[1C] float64 bool[2C] int64[2C] int32[2C] '
     'int64[1C] int64[1C] int64[1C] int64[2C] float64[1C] int64[1C] bool[2C] int64[2C] '
     'int32[2C] int64[1C] int64[1C] int64[1C] int64[2C] float64[1C] int64[1C] bool[2C] '
     'int64[2C] int32[2C] int64[1C] int64[1C] int64[1C] int64[2C] float64[1C] int64[1C] '
     'int64[2C] bool[2Cr] float64[1C] int64[1C] bool bool[1C] float64[1C] int64[1C] '
     'int64[1C] int64[1C] float64[1C] int64[1C] bool int64[1C] int64[1C] int64[1C] '
     'int64[1C] int64[1C] int64[1C] int64 float64[1C] float64[1C] float64[1C] bool '
     'int64[1C] int64[1C] int64[1C] int64[2C] bool[2C] int64[1C] int64[1C] int64[1C] '
     'int64[1C] int64[1C] bool[2Cr] int64 int64 float64 int64 int64 int64 float64'),
    ('gpualloc.core.schedule', 'rigid_totals',
     'int64[1C] int64[1C] float64[1C] float64[1C] bool'),
    ('gpualloc.core.insert', 'place_held',
     'int64[1C] int64[1C] int64[1C] int64[1C] bool[2C] int64[1C] int64[2C] int32[2C] '
     'int64[1C] int64[1C] int64[2C] bool[2Cr] int64[1C] int64[1C] int64[1C] int64[1C] '
     'int64[1C]'),
    ('gpualloc.core.insert', 'insert_parallel',
     'int64[1C] float64[1C] int64 bool bool bool[2C] int64[1C] int64[2C] int32[2C] '
     'int64[2C] int64[1C] int64[1C] int64[1C] int64[2C] bool[2Cr] float64[1C] int64[1C] '
     'int64[1C] int64[1C] int64[1C] float64[1C] int64[1C] int64[1C] int64[1C] int64[1C] '
     'int64[1C] int64[1C] int64'),
    ('gpualloc.kernels.pgd_cpu', '_dense',
     'float32[3C] bool[2C] int64[1C] bool[2C] float32[2C] float32[2C] float32[1C] float32 '
     'float32[2C] float32[2C] float32[2C] float32[2C]'),
    ('gpualloc.core.schedule', 'serve_span',
     'int64 int64 bool[2C] int64[2C] bool float64[1C] int64[1C] int64[1C] int64[1C] '
     'int64[1C] int64[2C] int64[1C] bool[2C] float64[1C] float64[1C] bool int64[1C] '
     'int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] bool[2Cr] int64[1C]'),
    ('gpualloc.core.insert', 'insert_serial',
     'int64[1C] int64[1C] bool[2C] int64[1C] int64[2C] int32[2C] int64[1C] int64[1C] '
     'int64[2C] bool[2Cr] float64[1C] int64[1C] bool int64[1C] int64[1C] int64[1C] '
     'float64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64 '
     'int64[1C]'),
    ('gpualloc.core.blocks', 'first_free',
     'int32[2C] int64[1C] int64 int64 int64 int64[1C]'),
    ('gpualloc.core.segments', 'count_held',
     'int64[2C] int64[2C]'),
    ('gpualloc.core.classes', '_serve_steps',
     'int64[2C] bool[2C] int64[1C] int64[2C] int64[1C] bool[2C] float64[1C] int64[1C] '
     'int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] '
     'int64[1C] bool bool[2Cr] int64[1C] bool'),
    ('gpualloc.core.blocks', 'any_start',
     'int32[2C] int64[1C] int64 int64 int64 int64'),
    ('gpualloc.core.footprint', '_first_reaching',
     'int64[2C] int64[2C] int64[2C] bool[1C] int64[1C] int64 int64[1C]'),
    ('gpualloc.core.insert', 'mark',
     'bool[2C] int64[1C] int32[2C] int64 int64 int64 int64 int64[2C] bool'),
    ('gpualloc.core.blocks', 'earliest',
     'int32[2C] int64[1C] int64 int64 int64 int64 bool[1C]'),
    ('gpualloc.policies.greedy', '_excess',
     'int64[1C] int64[1C] int64 int64 int64 int64'),
    ('gpualloc.core.blocks', 'update_runs',
     'bool[2C] int32[2C] int64 int64 int64'),
    ('gpualloc.core.insert', 'place',
     'int64 int64 int64 int64 int64 bool[2C] int64[1C] int64[2C] int32[2C] int64[1C] '
     'int64[1C] int64[2C] bool[2Cr] int64[1C]'),
    ('gpualloc.policies.greedy', '_fit_keys',
     'bool[1C] int64[1C] int64 int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] '
     'int64[1C]'),
    ('gpualloc.core.blocks', 'free_blocks',
     'int32[2C] int64[1C] int64 int64 int64 bool[1C]'),
    ('gpualloc.core.blocks', 'longest_free',
     'int32[2C] int64[1C] int64 int64'),
    ('gpualloc.core.blocks', 'settle_columns',
     'bool[2C] int32[2C] int64 int64 int64'),
    ('gpualloc.core.blocks', 'update_columns',
     'bool[2C] int32[2C] int64 int64'),
    ('gpualloc.policies.fifo', '_run_rigid',
     'int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] bool[1C] int64 '
     'int64 int64[2C] bool[1C]'),
    ('gpualloc.core.pack', 'fill',
     'bool[2C] int64[2C] int64[1C] int64[2C] int64[1C] bool[2C] int64[1C] int64[1C] '
     'int64[1C] int64[1C] int64[1C] bool int64[2C] int64[1C] int64[1C]'),
    ('gpualloc.online.observe', 'last_day',
     'int64[2C] int64 int64[1C] int64 int64 int64[2C] int64'),
    ('gpualloc.core.blocks', 'cheapest_eviction',
     'int64[2C] bool[1C] int64[1C] int64 float64[1C]'),
    ('gpualloc.core.segments', 'read_segments',
     'int64[2C] bool[1C] bool[1C] int64[1C] int64[1C] int64[2C] int64[2C] int64[2C] '
     'bool[2C] bool[2C] bool[2C] bool[2C] bool[1C]'),
    ('gpualloc.core.insert', 'unplace',
     'int64[1C] int64[1C] bool[2C] int64[1C] int64[2C] int32[2C] int64[1C] int64[1C] '
     'int64[2C] bool[2Cr] int64[1C] int64[1C]'),
    ('gpualloc.core.guard', 'guarded_fit',
     'int32[2C] bool[2C] int64[1C] int64[1C] int64 int64 int64 int64 int64 int64[2C] '
     'bool[2Cr] float64[1C] int64[1C] bool bool float64 int64 int64[1C] int64'),
    ('gpualloc.core.classes', '_hall',
     'bool[2Cr] int64[1C] bool[2C] int64[1C] bool[2C] int64[2C] int64[2C]'),
    ('gpualloc.core.guarantee', '_settle_steps',
     'int64[2C] int64[1C] bool[2C] int64[1C] int64[2C] int64[1C] int64[1C] int64[1C] '
     'int64[1C] bool[2C] int64[1C] int64 bool[1C]'),
    ('gpualloc.core.guard', 'guarded_find',
     'int32[2C] bool[2C] int64[1C] int64[1C] int64 int64 int64 int64[2C] bool[2Cr] '
     'float64[1C] int64[1C] bool bool float64 int64[1C] int64'),
    ('gpualloc.core.segments', '_fill',
     'int64[2C] int64[2C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] '
     'int64[1C] int64[1C] int64[1C] int64[1C] int64[1C]'),
    ('gpualloc.core.classes', 'fits_at_once',
     'int64[2C] int64 bool[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] int64[1C] '
     'int64 bool[2Cr] int64[1C] int64[1C] bool[2C] int64[2C] int64[1C]'),
    ('gpualloc.online.start', '_starts_in_turn',
     'int64[2C] int64[1C] int64[1C] int64[1C] int64[1C] bool[1C] int64[1C] int64[1C] '
     'int64[1C] int64[1C] int64[1C] int64[1C] int64 bool[2Cr] int64[1C] int64[1C] bool[2C] '
     'int64[2C] int64[1C] int64 bool'),
]
