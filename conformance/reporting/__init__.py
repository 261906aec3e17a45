"""Reports: what a run leaves behind, and the studies and joins made from stored reports.

`report` (report.json and report.md of a run: the summary, the tables), `digest` (what both renderers say from
one place: findings, partial runs, the memory table), `page` (report.html), `charts` (its pictures), `store`
(report.json on disk), `merge` (shards of one run, or runs over other adapters, joined into one report),
`reexpect` (expectations applied again to stored results), `coverage` (which feature pairs a profile covers)
and `fp8_accuracy` (FA3 paper Table 3 on the CPU, and an adapter's FP8 error against it).
"""
