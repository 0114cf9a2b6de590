"""The lab's em metric (exact match) as an `evaluate` module.

    evaluate.load("<this folder>").compute(predictions=[...], references=[...], task="generation")

`task` picks the definition of that task's CodeXGLUE evaluator: "translation" (the default:
equal after strip()) or "generation" (the same whitespace tokens).
Scores are 0-100 and come from lab.eval.metrics (no metric code here).
"""
from lab.eval.metrics import evaluate_module

ExactMatch = evaluate_module("em", "ExactMatch")
