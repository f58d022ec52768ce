"""Trace import: a real workload becomes a scenario file of PROBLEM.md.

    python -m gpualloc.trace alibaba PODS.csv --start 134d --length 96h --sample-gpus 64 -o a.json
    python -m gpualloc.trace csv jobs.csv --gpus 64 --length 7d -o jobs.json

Both importers read rows into `Record`s (times in seconds), then one converter
cuts a time window into `step`-long timesteps and applies the rules below,
counting every record under exactly one primary rule (they add up to the rows
read) plus the modifiers that touched it. The command prints the counts.

Trace files are UTF-8 text, with or without the byte-order mark a
spreadsheet's "CSV UTF-8" writes; any other file (another encoding, binary)
is one line naming the file and line, exit code 2, and nothing is written.

Modules, in the order data flows (imports go one way):
`readers` (files -> records: the Alibaba pod and node lists, a generic CSV;
errors naming file, line and field) -> `convert` (records -> scenario:
window, services and their demand curves, pools, sampling, `Import` and its
report) -> `command` (the argparse command, `main`; `__main__` runs it).

Alibaba GPU trace 2023 (`openb_pod_list_*.csv`, and `openb_node_list_gpu_node.csv`
for the cluster). The trace does not label training or inference; the
mapping of a pod's `qos` to a kind and a priority is an assumption, stated
here and changeable with `--kind QOS=KIND` and `--priority QOS=P`:

    qos         kind                priority   why
    LS          realtime_inference  9          latency-sensitive: serving
    Guaranteed  training            8          reserved, long-running
    Burstable   training            5          elastic CPU, GPU work of hours
    BE          batch_inference     2          best effort: batch work

- Serving pods (kind realtime_inference) are aggregated into services, one per
  (GPU models allowed, GPUs per pod, priority). A pod wants one replica from
  its `creation_time` to its `deletion_time` (a pod that never ran wanted
  one too: unserved demand is demand). A service's demand at a timestep is
  the peak (`--demand peak`, default) or time-mean (`--demand mean`) of the
  GPUs its pods want during the step, in replicas, rounded up. Fractional
  pods (`gpu_milli` < 1000) of 1-GPU services add their share, so two
  half-GPU pods make one replica. A service arrives at its first step with
  demand; pods cut by the window count for their part inside it.
- Rigid pods (every other kind) arrive at the step of their `creation_time`
  and run for `deletion_time - scheduled_time`, rounded up to whole steps
  (at least one). A fractional pod gets one whole GPU (the plan has no GPU
  sharing). A pod created before the window and still running at its start
  arrives at step 0 with the rest of its run; one created before and started
  inside arrives at step 0 with its whole run; one that runs past the
  window's end is kept whole and the horizon cuts it (PROBLEM.md). Failed
  pods ran and held their GPUs: they count like any other.
- Pods that never ran (no `scheduled_time`) and are rigid have no runtime:
  left out by default, or with `--never-ran keep` kept with the time they
  waited (`deletion_time - creation_time`) as their run.
- Pods asking for no GPU (`num_gpu` 0) are not GPU work: left out.
- `gpu_spec` (models allowed, `|`-separated; empty: any) becomes `gpu_types`,
  narrowed to the models the cluster has; a pod none of whose models the
  cluster has is left out (no GPU could ever hold it).
- Pods deleted at the trace's last timestamp were cut by the trace's end:
  their runtime is a lower bound (counted, kept).
- The cluster: the trace's own nodes (default), a sample of them
  (`--sample-gpus N`: at least one node of every model, so every gpu_spec can
  be honoured, the rest in proportion to each model's share of the trace's
  GPUs), or pools given with `--pool NAME:COUNT:GPUS_PER_NODE:TYPE:MEMORY_GB`.
  A pool is one (model, GPUs per node) of the node list. GPU memory is not in
  the trace (`--memory MODEL=GB`; G1-G3 are undisclosed models) and no pod
  asks for GPU memory, so it changes nothing in the plans.

Generic CSV (`csv`): one row per job with an id, a submit time, a duration
and a GPU count; optionally GPU types, priority and kind. Column names and
time units are options. Rows are rigid jobs of `--kind` unless a kind column
says otherwise; rows of kind realtime_inference are replicas wanted from
submit for their duration, aggregated into services as above. A job
submitted before the window is left out (the CSV has no start time to tell
whether it was still running). Real-time services the trace lacks can be
added with `--realtime-services N` (synthetic diurnal curves of the
generator, seeded). The cluster is given with `--pool` or `--gpus N`.
"""
from __future__ import annotations

from gpualloc.trace.readers import (ALIBABA_COLUMNS, MILLI, QOS_KIND, QOS_PRIORITY, CsvColumns,
                                    Record, TraceError, read_alibaba, read_csv, read_nodes)
from gpualloc.trace.convert import (DEFAULT_MEMORY_GB, MODEL_MEMORY_GB, MODIFIERS, PRIMARY, Import,
                                    Window, convert, parse_pool, step_profile, trace_pools)
from gpualloc.trace.command import alibaba_command, csv_command, main, parser, seconds

__all__ = [
    "ALIBABA_COLUMNS", "DEFAULT_MEMORY_GB", "MILLI", "MODEL_MEMORY_GB", "MODIFIERS", "PRIMARY",
    "QOS_KIND", "QOS_PRIORITY", "CsvColumns", "Import", "Record", "TraceError", "Window",
    "alibaba_command", "convert", "csv_command", "main", "parse_pool", "parser", "read_alibaba",
    "read_csv", "read_nodes", "seconds", "step_profile", "trace_pools",
]
