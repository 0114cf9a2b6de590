"""Reading a study: the room of `lab report`, `lab stats` and `lab study`'s last step.

lab.study runs a study (its recipe expanded into stages, each run once, keyed by its config);
this package reads what a study folder holds, and writes nothing but tables, figures and the
report: collect (the stages' outputs as the results, samples and probes tables), plan (the
analysis frozen when the study began, which every reader holds to), questions (the questions a
study may declare, and their power), primary and primary_text (the declared questions' tests,
and their table as text), report_data (what a report reads of a study folder) and cells (the
secondary table), dose and dose_text, timing and decontam_lift (the secondary analyses), tables,
figure and html + templates/ (the renderers), report (lab report, lab stats) and study_record
(study.json as a reader sees it, and the mark of a smoke study).

Reading never imports running: it reads a study through the recipe's types and the stage grid
(lab.study.recipe, lab.study.grid and the stage kinds they name), which sit below it in
scripts/architecture.py's layers; the runner, which calls collect, sits above it.
"""
