"""stepscope's own TensorBoard tab: the verdict of every run, its cycles and ranks as charts, two runs side
by side, and a window of steps of a large trace cut out as a small run.

    tensorboard --logdir logs           # the tab "stepscope" (registered through the tensorboard_plugins
                                        # entry point); so does `stepscope tensorboard --logdir logs`

plugin.py is the TensorBoard plugin (routes), runs.py finds the runs (a run folder, or the sibling folders
of one multi-rank job, as `stepscope analyze` joins them), cache.py analyses each run once,
views.py shapes the JSON the frontend draws, window.py writes a window of steps as its own run, and
static/ holds the frontend: one ES module and the vendored chart library (uPlot, MIT).
"""
