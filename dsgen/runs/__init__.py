"""Running one plan: the run vocabulary (:mod:`~dsgen.runs.records`: paths, needs, failures), the store of a
comparison's files (:mod:`~dsgen.runs.store`), the data stages (:mod:`~dsgen.runs.data`: inputs, datasets,
postprocessing, data-level fits) and the pipeline that runs a plan's stages into a result
(:mod:`~dsgen.runs.pipeline`). Many plans at once are the scheduler's (:mod:`dsgen.scheduling`) and
:mod:`dsgen.orchestration`'s.
"""
