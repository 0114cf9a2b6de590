"""Reading a study: the rooms of `lab report`, `lab stats` and `lab study`'s last step.

lab.study runs a study (its recipe expanded into stages, each run once, keyed by its config);
this package reads what a study folder holds, and writes nothing but tables, figures and the
report: collect (the stages' outputs as results, samples and probe tables), plan (the analysis
frozen when the study began, which every reader holds to), questions and primary (the declared
questions and their tests), report_data and cells (a report's numbers), dose, timing and
decontam_lift (the secondary analyses), tables, figure and html (their renderers), report (lab
report, lab stats) and study_record (study.json as a reader sees it, and the smoke mark).

Reading never imports running: it reads a study through the recipe's types and the stage grid
(lab.study.recipe, lab.study.grid and the stage kinds they name), which sit below it in
scripts/architecture.py's layers; the runner, which calls collect, sits above it.
"""
