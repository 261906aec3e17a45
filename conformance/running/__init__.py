"""Running: turning a selection of cases and adapters into raw results, on this machine or spread over several.

`run_context` (a front end's options into adapters, expectations and an engine), `engine` (one case on one
adapter: inputs, calls, the judge), `worker` (each adapter call in a child process: crashes and timeouts are
results), `parallel` (``--workers N``), `shard` (``--shard K/N``: a deterministic split of a selection), `eta`
(time left), `environment` (this machine as a report states it), `peak_memory` (peak device memory of one call)
and `memory_policy` (how a ``memory`` family case is run).
"""
